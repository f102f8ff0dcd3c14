// WindowPool: the type 2 memory windows behind scoped remote writes (EngineConfig::
// scoped_remote_writes).
//
// A rendezvous destination is reachable by the peer only through a window bound to exactly its
// bytes. The engine asks for a grant when it answers a rendezvous request, posts the bind on its
// send queue ahead of the reply that carries the grant's rkey, and when the transfer ends (last
// fragment or abort) queues an invalidate (LOCAL_INV). Only when that invalidate has completed
// may the destination reach the application (or be freed, after an abort): until then the peer
// could still write into it. Windows are reused; each grant bumps the window's key tag, so every
// earlier key of the window is stale.
//
// Without window support (no type 2 windows on the device, bemalloc memory not registered with
// it, or none can be allocated) the pool is disabled and the engine grants the region's rkey.
//
// Single-threaded: the engine's I/O thread.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "bx/buffer.h"
#include "engine/wire.h"
#include "flow_control/work_request_chain.h"
#include "verbs/verbs.h"

namespace bx::engine {

class WindowPool {
 public:
  // A window bound (or about to be) over one destination.
  struct Grant {
    int32_t window = -1;   // pool index; -1: no window (the region's rkey is granted)
    uint32_t rkey = 0;     // the key the peer writes with
    ibv_mr* mr = nullptr;  // the region the window is bound in
  };

  // Probes the device of `qp` when `wanted`: one window is allocated now, so a provider that
  // advertises windows but cannot allocate them is found before the first rendezvous.
  WindowPool(ibv_qp* qp, const verbs::Library& lib, bool wanted);
  // Deallocates every window (which invalidates it).
  ~WindowPool();
  WindowPool(const WindowPool&) = delete;
  WindowPool& operator=(const WindowPool&) = delete;

  bool enabled() const { return enabled_; }

  // A window for `destination` (a bemalloc buffer) with a fresh key. Grant::window is -1 when
  // none can be allocated; the first such failure disables the pool.
  Grant Acquire(const Buffer& destination);
  // Fills `slot` with the bind of `grant` over `length` bytes at `addr`, allowing remote writes.
  void PrepareBind(flow_control::WorkRequestChain::Slot& slot, const Grant& grant, uint64_t addr,
                   uint64_t length);

  // The transfer into window `w` has ended: after the invalidate, the destination is handed to
  // `channel`'s receiver (OnInvalidated returns the channel).
  void InvalidateForDelivery(uint32_t w, ChannelId channel);
  // The transfer into window `w` was aborted: `destination` is freed after the invalidate.
  void InvalidateAndFree(uint32_t w, Buffer destination);
  bool has_invalidations() const { return !invalidations_.empty(); }
  // Prepares queued invalidates while `chain` has room; each slot names its window.
  void PrepareInvalidations(flow_control::WorkRequestChain& chain);
  // The invalidate of window `w` (a retired slot's Slot::window - 1) completed: the window goes
  // back to the pool and an aborted destination is freed. Returns the channel whose held
  // receive events it releases, if it was a delivery.
  std::optional<ChannelId> OnInvalidated(uint32_t w);

  // The engine failed: every window is deallocated (none may outlive the memory it covers).
  void Clear();

  uint64_t allocated() const { return windows_.size(); }
  uint64_t bound() const { return bound_; }
  uint64_t invalidated() const { return invalidated_; }
  uint64_t unscoped() const { return unscoped_; }

 private:
  struct Window {
    ibv_mw* mw = nullptr;
    uint32_t rkey = 0;      // the key of the latest bind (the next one bumps its tag)
    bool delivers = false;  // its invalidate releases a held message of `channel`
    ChannelId channel = 0;
    Buffer aborted;  // an aborted destination, freed once the invalidate completes
  };

  void Disable(const std::string& why);
  int32_t Allocate();
  void DeallocAll();

  const verbs::Library& lib_;
  ibv_qp* qp_;
  bool enabled_ = false;
  std::vector<Window> windows_;  // indices stay valid
  std::vector<uint32_t> free_;
  std::deque<uint32_t> invalidations_;  // waiting for a chain slot
  uint64_t bound_ = 0, invalidated_ = 0, unscoped_ = 0;
};

}  // namespace bx::engine
