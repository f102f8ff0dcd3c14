// EnginePoller: what an I/O thread (base/io_thread.h) polls to drive engines. It owns one
// completion queue shared by the thread's engines (paper section 6's thread domains: no two
// threads touch the same CQ or QP), dispatches each completion to its engine by QP number, and
// pumps the engines that have new work after the pass's tasks. When the thread sleeps it arms
// the CQ, whose completion channel wakes the thread's epoll set.
//
// Lifetime: the I/O thread owns its poller and destroys it after its loop has ended. Whatever
// holds an engine on it holds the thread, so the CQ and the thread's protection domain (a parent
// domain with its thread domain, when the device has them) go after every QP in them.
//
// Threads: cq, td, pd and has_own_domain from any thread; everything else on the I/O thread.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/io_thread.h"
#include "bx/status.h"
#include "engine/engine.h"
#include "verbs/verbs.h"

namespace bx::engine {

class EnginePoller final : public Poller {
 public:
  static constexpr int kDefaultCqEntries = 65536;  // completions of all engines on one thread

  // Starts an I/O thread that polls a new EnginePoller: a CQ of `cq_entries` on `context`, and
  // a thread domain with a parent domain under `pd` (the device's protection domain; null: none)
  // where the device has them.
  static Result<std::shared_ptr<IoThread>> StartThread(verbs::Library& lib, ibv_context* context,
                                                       ibv_pd* pd, const IoThreadOptions& options,
                                                       int cq_entries = kDefaultCqEntries);
  // The poller of `thread`, which StartThread must have started (a plain cast: a thread started
  // otherwise has another poller or none).
  static EnginePoller& Of(IoThread& thread) { return static_cast<EnginePoller&>(*thread.poller()); }

  ~EnginePoller() override;
  EnginePoller(const EnginePoller&) = delete;
  EnginePoller& operator=(const EnginePoller&) = delete;

  ibv_cq* cq() const { return cq_; }
  ibv_td* td() const { return td_; }  // the thread domain QPs of this thread may be created in
  // Where this thread's QPs are created: a parent domain carrying td(), or the device's `pd`
  // when it has no thread or parent domains.
  ibv_pd* pd() const { return domain_ != nullptr ? domain_ : device_pd_; }
  bool has_own_domain() const { return domain_ != nullptr; }

  // I/O thread. An engine's completions are dispatched to it from AddEngine to RemoveEngine; a
  // dirty engine is pumped after the pass's tasks.
  void AddEngine(Engine* engine);
  void RemoveEngine(Engine* engine);
  void MarkDirty(Engine* engine);

  // Poller, called by the I/O thread.
  bool Poll() override;
  bool Flush() override;
  bool ExpectsWork() const override { return expecting_ > 0; }
  void Arm() override;
  int ReadyFd() const override;
  void OnReady() override;

 private:
  explicit EnginePoller(verbs::Library& lib) : lib_(lib) {}
  // Re-reads `engine`'s ExpectsCompletion after it did work, keeping expecting_ in step.
  void Recount(Engine* engine);

  verbs::Library& lib_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_td* td_ = nullptr;
  ibv_pd* device_pd_ = nullptr;
  ibv_pd* domain_ = nullptr;  // the parent domain, owned

  std::unordered_map<uint32_t, Engine*> engines_;
  int expecting_ = 0;  // engines whose last reading expected a completion
  std::vector<Engine*> dirty_;
};

}  // namespace bx::engine
