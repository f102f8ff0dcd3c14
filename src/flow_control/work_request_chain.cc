#include "flow_control/work_request_chain.h"

#include <cassert>
#include <cstring>

namespace bx::flow_control {

WorkRequestChain::WorkRequestChain(uint32_t depth) : depth_(depth), slots_(depth) {
  assert(depth > 0);
}

WorkRequestChain::Slot& WorkRequestChain::Prepare() {
  assert(free_slots() > 0);
  Slot& slot = at(head_);
  std::memset(&slot.wr, 0, sizeof(slot.wr));
  slot.sge = {};
  slot.sequence = head_;
  slot.bytes = 0;
  slot.cookie = nullptr;
  slot.window = 0;
  slot.wr.wr_id = head_;
  slot.wr.sg_list = &slot.sge;
  ++head_;
  return slot;
}

int WorkRequestChain::PostPending(ibv_qp* qp, PostFn post) {
  if (posted_ == head_) return 0;
  for (uint64_t s = posted_; s < head_; ++s) {
    Slot& slot = at(s);
    slot.wr.next = s + 1 < head_ ? &at(s + 1).wr : nullptr;
    slot.wr.send_flags &= ~unsigned(IBV_SEND_SIGNALED);
  }
  // Selective signalling: the batch's last request stands for all of it.
  at(head_ - 1).wr.send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  int rc = post(qp, &at(posted_).wr, &bad);
  if (rc != 0) {
    while (posted_ < head_ && &at(posted_).wr != bad) ++posted_;
    return rc;
  }
  ++batches_;
  requests_posted_ += head_ - posted_;
  posted_ = head_;
  return 0;
}

void WorkRequestChain::RetireThrough(uint64_t sequence, const std::function<void(Slot&)>& retired) {
  assert(sequence >= tail_ && sequence < posted_);
  while (tail_ <= sequence) {
    retired(at(tail_));
    ++tail_;
  }
}

void WorkRequestChain::DropAll(const std::function<void(Slot&)>& dropped) {
  while (tail_ < head_) {
    dropped(at(tail_));
    ++tail_;
  }
  posted_ = head_ = tail_;
}

}  // namespace bx::flow_control
