// The discrete-event core: integer-nanosecond virtual time and plain event structs in a binary
// heap. Ties in time break by insertion order, so a run is a pure function of its seed.
// Single-threaded.
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
  uint64_t order;
  uint32_t a;
  uint32_t b;
  EventKind kind;
};

class EventQueue {
 public:
  TimeNs now() const { return now_; }
  bool empty() const { return heap_.empty(); }
  uint64_t processed() const { return processed_; }

  void Schedule(TimeNs at, EventKind kind, uint32_t a, uint32_t b = 0) {
    heap_.push_back(Event{at, next_order_++, a, b, kind});
    SiftUp(heap_.size() - 1);
  }

  TimeNs NextTime() const { return heap_.front().time; }

  // Removes the earliest event and advances the clock to it. Requires !empty().
  Event Pop() {
    Event top = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(0);
    now_ = top.time;
    ++processed_;
    return top;
  }

 private:
  static bool Before(const Event& x, const Event& y) {
    return x.time < y.time || (x.time == y.time && x.order < y.order);
  }
  void SiftUp(size_t i) {
    Event e = heap_[i];
    while (i > 0) {
      size_t parent = (i - 1) / 2;
      if (!Before(e, heap_[parent])) break;
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
      if (child + 1 < n && Before(heap_[child + 1], heap_[child])) ++child;
      if (!Before(heap_[child], e)) break;
      heap_[i] = heap_[child];
      i = child;
    }
    heap_[i] = e;
  }

  std::vector<Event> heap_;
  TimeNs now_ = 0;
  uint64_t next_order_ = 0;
  uint64_t processed_ = 0;
};

}  // namespace bx::sim
