// Type 2B memory windows (IBA 10.6.7; rdma-core's ibv_alloc_mw(3), ibv_post_send(3)): a window
// grants remote access to part of an MR, to one QP, until it is invalidated. The application
// allocates a window unbound; a bind work request on a QP binds it; a local invalidate on the
// QP, a SEND_WITH_INV from the peer on that QP, or ibv_dealloc_mw frees it.
//
// The rules each step checks, and what a violation costs, follow the man pages and IBA:
//   bind        window free and of the QP's PD; new rkey keeps the window's index; MR registered
//               with IBV_ACCESS_MW_BIND in the same PD; range inside the MR; remote write needs
//               local write on the MR. Violation: IBV_WC_MW_BIND_ERR, QP to error.
//   local inv   the rkey names a window of the QP's PD, bound, with that exact tag.
//               Violation: IBV_WC_LOC_QP_OP_ERR, QP to error.
//   remote inv  the rkey names a window bound to the receiving QP, with that exact tag.
//               Violation: the responder fails the request (IBV_WC_REM_INV_REQ_ERR).
//   access      the rkey's tag is the current one, the window is bound to the responding QP,
//               grants the access, and covers the range. Violation: IBV_WC_REM_ACCESS_ERR.
#include <cerrno>
#include <mutex>

#include "simnic/device.h"
#include "simnic/verbs_internal.h"

namespace bx::simnic {
namespace {

constexpr uint32_t kSlotMask = 0x7fffff;  // bits 30..8 of a window key, shifted down
constexpr int kWindowAccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;

uint32_t SlotOf(uint32_t key) {
  return (key >> 8) & kSlotMask;
}

// True when [addr, addr + length) lies inside [base, base + size), without overflow.
bool Inside(uint64_t addr, uint64_t length, uint64_t base, uint64_t size) {
  return addr >= base && addr - base <= size && length <= size - (addr - base);
}

}  // namespace

SimMw* Device::FindMwLocked(uint32_t key) const {
  if (!(key & kMwKeyBit)) return nullptr;
  uint32_t slot = SlotOf(key);
  return slot < mw_slots_.size() ? mw_slots_[slot] : nullptr;
}

void Device::UnbindLocked(SimMw* mw) {
  if (!mw->bound) return;
  --mw->mr->bound_windows;
  mw->bound = false;
  mw->mr = nullptr;
  mw->qp = nullptr;
}

SimMw* Device::AllocMw(SimPd* pd) {
  auto* mw = new SimMw{};
  std::unique_lock lock(mr_mu_);
  uint32_t slot;
  if (!mw_free_.empty()) {
    slot = mw_free_.back();
    mw_free_.pop_back();
  } else {
    if (mw_slots_.size() >= size_t(kMaxMw)) {
      delete mw;
      return nullptr;
    }
    slot = uint32_t(mw_slots_.size());
    mw_slots_.push_back(nullptr);
    mw_generation_.push_back(0);
  }
  // The first tag differs from the last one used in this slot, so a stale key of the previous
  // window in the slot does not match before the consumer's first bind picks a tag of its own.
  uint8_t tag = ++mw_generation_[slot];
  mw->handle = kMwKeyBit | (slot << 8) | tag;
  mw->rkey = mw->handle;
  mw->protection_domain = pd;
  mw_slots_[slot] = mw;
  return mw;
}

void Device::DeallocMw(SimMw* mw) {
  std::unique_lock lock(mr_mu_);
  UnbindLocked(mw);
  uint32_t slot = SlotOf(mw->handle);
  mw_slots_[slot] = nullptr;
  mw_free_.push_back(slot);
  delete mw;
}

ibv_wc_status Device::BindMw(const SimQp* qp, const SendWqe& wqe) {
  std::unique_lock lock(mr_mu_);
  SimMw* mw = FindMwLocked(wqe.bind_mw_handle);
  if (mw == nullptr || mw->handle != wqe.bind_mw_handle) return IBV_WC_MW_BIND_ERR;
  if (mw->bound || mw->protection_domain != qp->protection_domain) return IBV_WC_MW_BIND_ERR;
  // The consumer owns only the tag: the index bits must stay the window's.
  if ((wqe.bind_rkey & ~0xffu) != (mw->handle & ~0xffu)) return IBV_WC_MW_BIND_ERR;
  if (!wqe.bind_has_mr || (wqe.bind_mr_lkey & kMwKeyBit)) return IBV_WC_MW_BIND_ERR;
  uint32_t mr_slot = wqe.bind_mr_lkey >> 8;
  SimMr* mr = mr_slot < mr_slots_.size() ? mr_slots_[mr_slot] : nullptr;
  if (mr == nullptr || mr->mr.lkey != wqe.bind_mr_lkey) return IBV_WC_MW_BIND_ERR;
  if (mr->protection_domain != mw->protection_domain || !(mr->access & IBV_ACCESS_MW_BIND))
    return IBV_WC_MW_BIND_ERR;
  // Local write may come along (rdma-core's own tests pass it, mlx5 takes it); a window grants
  // remote access only, so it is dropped. Anything else unknown is an error.
  if ((wqe.bind_access & ~(kWindowAccess | IBV_ACCESS_LOCAL_WRITE)) != 0) return IBV_WC_MW_BIND_ERR;
  if ((wqe.bind_access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(mr->access & IBV_ACCESS_LOCAL_WRITE))
    return IBV_WC_MW_BIND_ERR;
  if (!Inside(wqe.bind_addr, wqe.bind_length, mr->iova, mr->mr.length)) return IBV_WC_MW_BIND_ERR;
  mw->bound = true;
  mw->rkey = wqe.bind_rkey;
  mw->mr = mr;
  ++mr->bound_windows;
  mw->addr = wqe.bind_addr;
  mw->length = wqe.bind_length;
  mw->access = wqe.bind_access & ~(IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
  mw->zero_based = (wqe.bind_access & IBV_ACCESS_ZERO_BASED) != 0;
  mw->qp = qp;
  return IBV_WC_SUCCESS;
}

ibv_wc_status Device::InvalidateLocal(const SimQp* qp, uint32_t rkey) {
  std::unique_lock lock(mr_mu_);
  SimMw* mw = FindMwLocked(rkey);
  if (mw == nullptr || !mw->bound || mw->rkey != rkey ||
      mw->protection_domain != qp->protection_domain)
    return IBV_WC_LOC_QP_OP_ERR;
  UnbindLocked(mw);
  return IBV_WC_SUCCESS;
}

bool Device::InvalidateRemote(const SimQp* qp, uint32_t rkey) {
  std::unique_lock lock(mr_mu_);
  SimMw* mw = FindMwLocked(rkey);
  if (mw == nullptr || !mw->bound || mw->rkey != rkey || mw->qp != qp) return false;
  UnbindLocked(mw);
  return true;
}

void Device::FreeWindowsOf(const SimQp* qp) {
  std::unique_lock lock(mr_mu_);
  for (SimMw* mw : mw_slots_)
    if (mw != nullptr && mw->qp == qp) UnbindLocked(mw);
}

uint8_t* Device::ResolveRemote(const SimQp* qp, uint32_t rkey, uint64_t addr, uint64_t length,
                               int access) const {
  std::shared_lock lock(mr_mu_);
  if (rkey & kMwKeyBit) {
    const SimMw* mw = FindMwLocked(rkey);
    if (mw == nullptr || !mw->bound || mw->rkey != rkey || mw->qp != qp ||
        (mw->access & access) != access)
      return nullptr;
    // A zero-based window is addressed by offset from its start.
    uint64_t start = mw->zero_based ? 0 : mw->addr;
    if (!Inside(addr, length, start, mw->length)) return nullptr;
    const SimMr* mr = mw->mr;
    return static_cast<uint8_t*>(mr->mr.addr) + (mw->addr - mr->iova) + (addr - start);
  }
  uint32_t slot = rkey >> 8;
  const SimMr* mr = slot < mr_slots_.size() ? mr_slots_[slot] : nullptr;
  if (mr == nullptr || mr->mr.rkey != rkey || mr->protection_domain != qp->protection_domain ||
      (mr->access & access) != access || !Inside(addr, length, mr->iova, mr->mr.length))
    return nullptr;
  return static_cast<uint8_t*>(mr->mr.addr) + (addr - mr->iova);
}

namespace {

ibv_mw* AllocMwOp(ibv_pd* pd, ibv_mw_type type) {
  // Type 1 windows (bound with ibv_bind_mw) are not implemented; the device advertises 2B only.
  if (type != IBV_MW_TYPE_2) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  SimPd* protection = Protection(pd);
  SimMw* mw = ToSim(pd->context)->device->AllocMw(protection);
  if (mw == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  mw->mw.context = pd->context;
  mw->mw.pd = pd;
  mw->mw.rkey = mw->rkey;
  mw->mw.handle = mw->handle;
  mw->mw.type = IBV_MW_TYPE_2;
  protection->users.fetch_add(1);
  return &mw->mw;
}

int DeallocMwOp(ibv_mw* ibmw) {
  auto* mw = reinterpret_cast<SimMw*>(ibmw);
  SimPd* protection = mw->protection_domain;
  ToSim(ibmw->context)->device->DeallocMw(mw);
  protection->users.fetch_sub(1);
  return 0;
}

// ibv_bind_mw() reaches this only for type 1 windows, which the simnic never allocates.
int BindMwOp(ibv_qp*, ibv_mw*, ibv_mw_bind*) {
  return EINVAL;
}

}  // namespace

void InitMemoryWindowOps(SimContext* c) {
  ibv_context_ops& ops = c->vctx.context.ops;
  ops.alloc_mw = AllocMwOp;
  ops.dealloc_mw = DeallocMwOp;
  ops.bind_mw = BindMwOp;
}

}  // namespace bx::simnic
