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
// fabric simulator drive this same code. Single-threaded.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace bx::flow_control {

class FragmentScheduler {
 public:
  explicit FragmentScheduler(uint32_t quantum_bytes) : quantum_(quantum_bytes) {
    assert(quantum_bytes > 0);
  }

  uint32_t quantum() const { return quantum_; }
  bool empty() const { return ring_.empty(); }
  size_t active_flows() const { return ring_.size(); }
  // Visits started (each: one flow selected and topped up by a quantum).
  uint64_t rounds() const { return rounds_; }

  // `flow` has work; joins the back of the ring unless already in it.
  void Activate(uint32_t flow) {
    if (flow >= flows_.size()) flows_.resize(flow + 1);
    if (flows_[flow].active) return;
    flows_[flow] = {true, false, 0};
    ring_.push_back(flow);
  }

  bool active(uint32_t flow) const { return flow < flows_.size() && flows_[flow].active; }

  // The flow being visited (starting a visit if none is in progress). Requires !empty().
  uint32_t Current() {
    assert(!ring_.empty());
    State& s = flows_[ring_.front()];
    if (!s.visiting) {
      s.visiting = true;
      s.deficit += quantum_;
      ++rounds_;
    }
    return ring_.front();
  }

  // The current flow wants to send a unit of `bytes`: true (and charged) if its deficit covers it.
  bool Spend(uint32_t bytes) {
    State& s = flows_[ring_.front()];
    assert(s.visiting);
    if (bytes > s.deficit) return false;
    s.deficit -= bytes;
    return true;
  }

  // The current flow still has work but its visit is over: to the back, deficit kept.
  void EndVisit() {
    uint32_t flow = ring_.front();
    ring_.pop_front();
    flows_[flow].visiting = false;
    ring_.push_back(flow);
  }

  // The current flow has no work it can send now (empty, or waiting on its peer): leaves the ring
  // and forgets its deficit. Activate brings it back.
  void Deactivate() {
    uint32_t flow = ring_.front();
    ring_.pop_front();
    flows_[flow] = {};
  }

  // Removes `flow` wherever it is (a socket closing). O(active flows); closing is rare.
  void Remove(uint32_t flow) {
    if (!active(flow)) return;
    for (auto it = ring_.begin(); it != ring_.end(); ++it) {
      if (*it == flow) {
        ring_.erase(it);
        break;
      }
    }
    flows_[flow] = {};
  }

 private:
  struct State {
    bool active = false;
    bool visiting = false;
    uint32_t deficit = 0;
  };

  uint32_t quantum_;
  std::vector<State> flows_;   // by flow id
  std::deque<uint32_t> ring_;  // active flows; front = being visited
  uint64_t rounds_ = 0;
};

}  // namespace bx::flow_control
