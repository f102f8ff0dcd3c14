#include "engine/window_pool.h"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "alloc/verbs_registrar.h"
#include "bx/bemalloc.h"
#include "bx/log.h"

namespace bx::engine {
namespace {

// Once per process: thousands of engines would otherwise repeat it.
void SayUnscopedOnce(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    bx::Log(LogLevel::kWarning, "bexpress: scoped remote writes are off (" + why +
                                    "); rendezvous replies grant the whole bemalloc region's rkey");
  });
}

}  // namespace

// Windows need the device to have type 2 windows and bemalloc regions to be verbs MRs (with
// IBV_ACCESS_MW_BIND, as the registrar gives them).
WindowPool::WindowPool(ibv_qp* qp, const verbs::Library& lib, bool wanted) : lib_(lib), qp_(qp) {
  if (!wanted) return;
  if (bemalloc::RegisteredDevice() == nullptr) {
    Disable("bemalloc regions are not verbs memory regions");
    return;
  }
  ibv_device_attr attr{};
  if (int rc = lib_.query_device(qp_->context, &attr); rc != 0) {
    Disable(std::string("ibv_query_device: ") + std::strerror(rc));
    return;
  }
  if (attr.max_mw <= 0) {
    Disable("the device has no memory windows (max_mw = 0)");
    return;
  }
  enabled_ = true;
  if (int32_t w = Allocate(); w >= 0) free_.push_back(uint32_t(w));
}

WindowPool::~WindowPool() {
  DeallocAll();
}

void WindowPool::Disable(const std::string& why) {
  enabled_ = false;
  SayUnscopedOnce(why);
}

// A new window; -1 when none can be allocated. A failure before any window exists disables the
// pool.
int32_t WindowPool::Allocate() {
  errno = 0;
  ibv_mw* mw = verbs::Library::AllocMw(qp_->pd, IBV_MW_TYPE_2);
  if (mw == nullptr) {
    std::string why =
        std::string("ibv_alloc_mw(type 2): ") + std::strerror(errno != 0 ? errno : ENOMEM);
    if (windows_.empty()) {
      Disable(why);
    } else {
      SayUnscopedOnce(why + ", for some rendezvous");
    }
    return -1;
  }
  windows_.push_back(Window{mw, mw->rkey, false, 0, Buffer()});
  return int32_t(windows_.size() - 1);
}

WindowPool::Grant WindowPool::Acquire(const Buffer& destination) {
  Grant grant;
  if (!free_.empty()) {
    grant.window = int32_t(free_.back());
    free_.pop_back();
  } else {
    grant.window = Allocate();
  }
  if (grant.window < 0) {
    ++unscoped_;
    return grant;
  }
  Window& window = windows_[uint32_t(grant.window)];
  window.rkey = ibv_inc_rkey(window.rkey);
  grant.rkey = window.rkey;
  grant.mr = static_cast<ibv_mr*>(bemalloc::GetMR(destination.data())->handle);
  return grant;
}

void WindowPool::PrepareBind(flow_control::WorkRequestChain::Slot& slot, const Grant& grant,
                             uint64_t addr, uint64_t length) {
  slot.wr.opcode = IBV_WR_BIND_MW;
  slot.wr.num_sge = 0;
  slot.wr.bind_mw.mw = windows_[uint32_t(grant.window)].mw;
  slot.wr.bind_mw.rkey = grant.rkey;
  slot.wr.bind_mw.bind_info.mr = grant.mr;
  slot.wr.bind_mw.bind_info.addr = addr;
  slot.wr.bind_mw.bind_info.length = length;
  slot.wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ++bound_;
}

void WindowPool::InvalidateForDelivery(uint32_t w, ChannelId channel) {
  windows_[w].delivers = true;
  windows_[w].channel = channel;
  invalidations_.push_back(w);
}

void WindowPool::InvalidateAndFree(uint32_t w, Buffer destination) {
  windows_[w].aborted = std::move(destination);
  windows_[w].delivers = false;
  invalidations_.push_back(w);
}

// LOCAL_INV of each window whose transfer has ended: no bytes, no credit (it reaches nobody).
void WindowPool::PrepareInvalidations(flow_control::WorkRequestChain& chain) {
  while (!invalidations_.empty() && chain.free_slots() > 0) {
    uint32_t w = invalidations_.front();
    invalidations_.pop_front();
    auto& slot = chain.Prepare();
    slot.wr.opcode = IBV_WR_LOCAL_INV;
    slot.wr.num_sge = 0;
    slot.wr.invalidate_rkey = windows_[w].rkey;
    slot.window = w + 1;
  }
}

std::optional<ChannelId> WindowPool::OnInvalidated(uint32_t w) {
  ++invalidated_;
  Window& window = windows_[w];
  Buffer aborted = std::move(window.aborted);
  const bool delivers = std::exchange(window.delivers, false);
  free_.push_back(w);
  aborted.Reset();
  if (!delivers) return std::nullopt;
  return window.channel;
}

void WindowPool::DeallocAll() {
  // Deallocating a bound window invalidates it: nothing can reach its buffer afterwards.
  for (Window& w : windows_) {
    if (w.mw != nullptr) verbs::Library::DeallocMw(w.mw);
    w.mw = nullptr;
  }
}

void WindowPool::Clear() {
  DeallocAll();
  windows_.clear();
  free_.clear();
  invalidations_.clear();
}

}  // namespace bx::engine
