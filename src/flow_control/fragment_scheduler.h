// FragmentScheduler: which socket of an engine sends next (paper sections 5.4.1 and 6.1).
//
// Deficit round-robin by bytes over the flows (sockets) that have work. A visit tops the flow's
// deficit up by one quantum (= the fragment size); the flow then spends it on units of work:
// several small messages, or exactly one fragment of a large message (the engine ends the visit
// after a fragment). A 64-byte message therefore waits behind at most one fragment of every other
// busy flow, never behind a whole large message, and bytes are shared fairly between flows
// whatever their message sizes. A flow that runs out of work leaves the ring and forgets its
// deficit, as in classic DRR (Shreedhar and Varghese, 1995), so idle credit cannot pile up.
//
// Why DRR rather than plain round-robin: with one unit per visit, a flow of 64-byte messages would
// get 1/1000th of the bytes a flow of 64 KiB fragments gets; DRR gives both the same byte share.
//
// The class knows flows only by a small integer id; no verbs, no messages. The engine and the
// fabric simulator drive this same code (the simulator keeps 171,616 of them at paper scale, so
// the ring is a list threaded through the flow states and a scheduler allocates nothing beyond
// them). Single-threaded.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace bx::flow_control {

class FragmentScheduler {
 public:
  explicit FragmentScheduler(uint32_t quantum_bytes) : quantum_(quantum_bytes) {
    assert(quantum_bytes > 0);
  }

  uint32_t quantum() const { return quantum_; }
  bool empty() const { return head_ == kNone; }
  size_t active_flows() const { return active_flows_; }
  // Visits started (each: one flow selected and topped up by a quantum).
  uint64_t rounds() const { return rounds_; }

  // `flow` has work; joins the back of the ring unless already in it.
  void Activate(uint32_t flow) {
    if (flow >= flows_.size()) flows_.resize(flow + 1);
    if (flows_[flow].active) return;
    flows_[flow] = {true, false, 0, kNone};
    PushBack(flow);
  }

  bool active(uint32_t flow) const { return flow < flows_.size() && flows_[flow].active; }

  // The flow being visited (starting a visit if none is in progress). Requires !empty().
  uint32_t Current() {
    assert(!empty());
    State& s = flows_[head_];
    if (!s.visiting) {
      s.visiting = true;
      s.deficit += quantum_;
      ++rounds_;
    }
    return head_;
  }

  // The current flow wants to send a unit of `bytes`: true (and charged) if its deficit covers it.
  bool Spend(uint32_t bytes) {
    State& s = flows_[head_];
    assert(s.visiting);
    if (bytes > s.deficit) return false;
    s.deficit -= bytes;
    return true;
  }

  // The current flow still has work but its visit is over: to the back, deficit kept.
  void EndVisit() {
    uint32_t flow = PopFront();
    flows_[flow].visiting = false;
    PushBack(flow);
  }

  // The current flow has no work it can send now (empty, or waiting on its peer): leaves the ring
  // and forgets its deficit. Activate brings it back.
  void Deactivate() { flows_[PopFront()] = {}; }

  // Removes `flow` wherever it is (a socket closing). O(active flows); closing is rare.
  void Remove(uint32_t flow) {
    if (!active(flow)) return;
    uint32_t prev = kNone;
    for (uint32_t at = head_; at != flow; at = flows_[at].next) prev = at;
    uint32_t next = flows_[flow].next;
    (prev == kNone ? head_ : flows_[prev].next) = next;
    if (tail_ == flow) tail_ = prev;
    --active_flows_;
    flows_[flow] = {};
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct State {
    bool active = false;
    bool visiting = false;
    uint32_t deficit = 0;
    uint32_t next = kNone;  // the flow after this one in the ring
  };

  void PushBack(uint32_t flow) {
    flows_[flow].next = kNone;
    (tail_ == kNone ? head_ : flows_[tail_].next) = flow;
    tail_ = flow;
    ++active_flows_;
  }
  uint32_t PopFront() {
    uint32_t flow = head_;
    head_ = flows_[flow].next;
    if (head_ == kNone) tail_ = kNone;
    --active_flows_;
    return flow;
  }

  uint32_t quantum_;
  std::vector<State> flows_;  // by flow id
  // The ring of active flows, threaded through State::next; head_ is being visited.
  uint32_t head_ = kNone;
  uint32_t tail_ = kNone;
  uint32_t active_flows_ = 0;
  uint64_t rounds_ = 0;
};

}  // namespace bx::flow_control
