#include "engine/engine_poller.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>

#include "base/dcheck.h"

namespace bx::engine {
namespace {

constexpr int kPollBatch = 64;

}  // namespace

Result<std::shared_ptr<IoThread>> EnginePoller::StartThread(verbs::Library& lib,
                                                            ibv_context* context, ibv_pd* pd,
                                                            const IoThreadOptions& options,
                                                            int cq_entries) {
  std::unique_ptr<EnginePoller> p(new EnginePoller(lib));
  p->device_pd_ = pd;
  p->channel_ = lib.create_comp_channel(context);
  if (p->channel_ == nullptr) return Status::FromErrno(errno, "ibv_create_comp_channel");
  p->cq_ = lib.create_cq(context, cq_entries, p.get(), p->channel_, 0);
  if (p->cq_ == nullptr) return Status::FromErrno(errno, "ibv_create_cq");
  // A thread domain tells the provider that one thread drives these QPs, so it may skip locks.
  ibv_td_init_attr td_attr{};
  p->td_ = verbs::Library::AllocTd(context, &td_attr);  // optional: null where unsupported
  // QPs of this thread live in a parent domain carrying its thread domain, so on hardware no two
  // threads share the provider's locks or doorbell pages (optional too).
  if (p->td_ != nullptr && pd != nullptr) {
    ibv_parent_domain_init_attr attr{};
    attr.pd = pd;
    attr.td = p->td_;
    p->domain_ = verbs::Library::AllocParentDomain(context, &attr);
  }
  return IoThread::Start(options, std::move(p));
}

EnginePoller::~EnginePoller() {
  // Every QP in the domain and on the CQ is gone: their owners held the thread that owns this.
  if (domain_) lib_.dealloc_pd(domain_);
  if (cq_) {
    // ibv_destroy_cq waits until every event delivered on the channel is acknowledged: take and
    // ack any the thread did not get to before it stopped.
    int flags = fcntl(channel_->fd, F_GETFL);
    fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK);
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    while (lib_.get_cq_event(channel_, &cq, &ctx) == 0) lib_.ack_cq_events(cq, 1);
    lib_.destroy_cq(cq_);
  }
  if (td_) verbs::Library::DeallocTd(td_);
  if (channel_) lib_.destroy_comp_channel(channel_);
}

void EnginePoller::AddEngine(Engine* engine) {
  BX_DCHECK(LoopTasks::Current() != nullptr);  // on the I/O thread that polls this
  engine->home_ = LoopTasks::Current();
  engines_[engine->qp_num()] = engine;
}

void EnginePoller::Recount(Engine* engine) {
  const bool expecting = engine->ExpectsCompletion();
  if (expecting == engine->counted_expecting_) return;
  engine->counted_expecting_ = expecting;
  expecting_ += expecting ? 1 : -1;
}

void EnginePoller::RemoveEngine(Engine* engine) {
  if (engine->counted_expecting_) {
    engine->counted_expecting_ = false;
    --expecting_;
  }
  engines_.erase(engine->qp_num());
  std::erase(dirty_, engine);
}

void EnginePoller::MarkDirty(Engine* engine) {
  engine->dirty_ = true;
  if (std::find(dirty_.begin(), dirty_.end(), engine) == dirty_.end()) dirty_.push_back(engine);
}

bool EnginePoller::Poll() {
  ibv_wc wc[kPollBatch];
  bool found = false;
  for (;;) {
    int n = verbs::Library::PollCq(cq_, kPollBatch, wc);
    for (int i = 0; i < n; ++i) {
      auto it = engines_.find(wc[i].qp_num);
      if (it == engines_.end()) continue;  // a completion of an engine already removed
      Engine* engine = it->second;
      engine->OnCompletion(wc[i]);
      if (engine->dirty_) MarkDirty(engine);
      Recount(engine);
    }
    found |= n > 0;
    if (n < kPollBatch) return found;
  }
}

bool EnginePoller::Flush() {
  bool pumped = false;
  while (!dirty_.empty()) {
    std::vector<Engine*> dirty;
    dirty.swap(dirty_);
    for (Engine* e : dirty) {
      e->Pump();
      Recount(e);
    }
    pumped = true;
  }
  return pumped;
}

void EnginePoller::Arm() {
  verbs::Library::ReqNotifyCq(cq_, 0);
}

int EnginePoller::ReadyFd() const {
  return channel_->fd;
}

void EnginePoller::OnReady() {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  if (lib_.get_cq_event(channel_, &cq, &ctx) == 0) lib_.ack_cq_events(cq, 1);
}

}  // namespace bx::engine
