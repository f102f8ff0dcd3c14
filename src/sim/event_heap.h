// A binary min-heap of events ordered by (time, order). The event queue keeps one for events beyond
// its wheel. Single-threaded.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/config.h"

namespace bx::sim {

enum class EventKind : uint8_t {
  kPortTxDone,    // a = global port id: serialisation finished, the port may start the next packet
  kPacketArrive,  // a = packet id: arrives at packet.at_port
  kPauseArrive,   // a = global port id that is paused or resumed, b = 1 pause / 0 resume
  kNicWake,       // a = host: a rate-limited QP may send now
  kHostTimer,     // a = host or endpoint, b = timer kind (owned by the host stack)
  kWorkload,      // a = trainer, b = workload timer kind
};

struct Event {
  TimeNs time;
  // Breaks ties in time: the node that scheduled the event and that node's count of events
  // scheduled before it (EventQueue). A function of the model alone, so a run split into
  // partitions pops every node's events in the same order as one queue does.
  uint64_t order;
  uint32_t a;
  uint32_t b;
  uint32_t node;  // the host or switch (Network's node ids) whose state the event changes
  EventKind kind;
};

inline bool EventBefore(const Event& x, const Event& y) {
  return x.time < y.time || (x.time == y.time && x.order < y.order);
}
// The same order as a type, so that std::sort and std::upper_bound inline it (a function
// pointer is called through: 7% of a paper-scale run went to those calls).
struct EventOrder {
  bool operator()(const Event& x, const Event& y) const { return EventBefore(x, y); }
};

class EventHeap {
 public:
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.front(); }

  void Push(const Event& e) {
    heap_.push_back(e);
    SiftUp(heap_.size() - 1);
  }

  // Removes and returns the earliest event. Requires !empty().
  Event Pop() {
    Event top = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(0);
    return top;
  }

 private:
  void SiftUp(size_t i) {
    Event e = heap_[i];
    while (i > 0) {
      size_t parent = (i - 1) / 2;
      if (!EventBefore(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  void SiftDown(size_t i) {
    Event e = heap_[i];
    size_t n = heap_.size();
    for (;;) {
      size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && EventBefore(heap_[child + 1], heap_[child])) ++child;
      if (!EventBefore(heap_[child], e)) break;
      heap_[i] = heap_[child];
      i = child;
    }
    heap_[i] = e;
  }

  std::vector<Event> heap_;
};

}  // namespace bx::sim
