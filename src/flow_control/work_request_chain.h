// WorkRequestChain: the engine's send work requests, a circular array as deep as the QP's send
// queue (paper section 5.4.1), in three contiguous segments:
//
//     tail_ ........ posted_ ........ head_ ........ tail_ + depth
//     | in flight    | pending        | free          |
//
// Prepare() moves the first free slot into pending. PostPending() links every pending request
// into one list, marks only the last one signalled, and hands the list to the NIC with a single
// ibv_post_send (doorbell batching). That one completion retires the whole batch: the RNIC
// completes in order, so every earlier unsignalled request of the batch is done too. The chain
// can never hold more than `depth` requests, so the engine never overruns the send queue.
//
// Single-threaded: owned by the engine's I/O thread.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "verbs/verbs.h"

namespace bx::flow_control {

class WorkRequestChain {
 public:
  // What a slot remembers until its request retires.
  struct Slot {
    ibv_send_wr wr;
    ibv_sge sge;
    uint64_t sequence;  // also the wr_id
    uint32_t bytes;     // payload bytes (for the send window)
    void* cookie;       // the engine's: which message this request completes, if any
    uint32_t window;    // the engine's: 1 + the pool index of a window this request invalidates
    // Small control payloads sent inline (IBV_SEND_INLINE): the NIC copies them at post time.
    alignas(8) uint8_t inline_payload[32];
  };

  explicit WorkRequestChain(uint32_t depth);

  uint32_t depth() const { return depth_; }
  uint32_t free_slots() const { return depth_ - uint32_t(head_ - tail_); }
  uint32_t pending() const { return uint32_t(head_ - posted_); }
  uint32_t in_flight() const { return uint32_t(posted_ - tail_); }

  // Takes the next free slot (free_slots() must be > 0) into the pending segment, cleared.
  Slot& Prepare();

  // Posts all pending requests with one call through `post` (ibv_post_send's signature). On
  // failure the requests before the rejected one were accepted by the NIC and count as in
  // flight; the rest stay pending; the error number is returned.
  using PostFn = int (*)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
  int PostPending(ibv_qp* qp, PostFn post);

  // A signalled completion with wr_id `sequence` arrived: retires every in-flight request up to
  // and including it, oldest first, calling `retired` for each.
  void RetireThrough(uint64_t sequence, const std::function<void(Slot&)>& retired);

  // The QP failed: every in-flight and pending request is gone; `dropped` sees each once.
  void DropAll(const std::function<void(Slot&)>& dropped);

  // Counters.
  uint64_t batches() const { return batches_; }
  uint64_t requests_posted() const { return requests_posted_; }

 private:
  Slot& at(uint64_t seq) { return slots_[seq % depth_]; }

  uint32_t depth_;
  std::vector<Slot> slots_;
  uint64_t tail_ = 0, posted_ = 0, head_ = 0;
  uint64_t batches_ = 0, requests_posted_ = 0;
};

}  // namespace bx::flow_control
