// The discrete-event core: integer-nanosecond virtual time and plain event structs, popped in
// (time, insertion order), so a run is a pure function of its seed. Single-threaded.
//
// A timing wheel (calendar queue) of kBuckets buckets of 2^kBucketShift ns each. At paper scale
// one or two events fall due per simulated nanosecond, almost all within a few microseconds.
// Scheduling appends to an unsorted bucket; the bucket being drained is sorted once (about ten
// events) and read in order, and an event scheduled into it is inserted in place. Events beyond the
// wheel's horizon wait in a second heap and join the current bucket when its turn comes. The pop
// order is exactly that of one binary heap over all events (tested against one), so results do not
// depend on the bucket width. The horizon is short on purpose: nearly every event is due within a
// link delay plus a serialisation (about 2.4 us), and a small wheel (512 buckets of about 16
// events) stays in the L2 cache; 4096 buckets did not.
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/config.h"
#include "sim/event_heap.h"

namespace bx::sim {

class EventQueue {
 public:
  static constexpr int kBucketShift = 3;    // 8 ns per bucket
  static constexpr int64_t kBuckets = 512;  // horizon 4 us

  TimeNs now() const { return now_; }
  bool empty() const { return size_ == 0; }
  uint64_t processed() const { return processed_; }

  void Schedule(TimeNs at, EventKind kind, uint32_t a, uint32_t b = 0) {
    Insert(Event{at, next_order_++, a, b, kind});
  }

  // An event that may turn out to be a no-op (a port's serialisation end with nothing waiting,
  // network.h) takes its place in the order now and is scheduled only if it is needed: it then
  // pops exactly where it would have, so skipping the others changes no result.
  uint64_t ReserveOrder() { return next_order_++; }
  void ScheduleReserved(TimeNs at, uint64_t order, EventKind kind, uint32_t a, uint32_t b = 0) {
    assert(!Passed(at, order));
    Insert(Event{at, order, a, b, kind});
  }
  // Whether an event at (at, order) would have been popped already.
  bool Passed(TimeNs at, uint64_t order) const {
    return at < now_ || (at == now_ && order < popped_order_);
  }

  // Time of the earliest event. Requires !empty().
  TimeNs NextTime() {
    Settle();
    return run_[next_].time;
  }

  // Removes the earliest event and advances the clock to it. Requires !empty().
  Event Pop() {
    Settle();
    Event e = run_[next_++];
    --size_;
    now_ = e.time;
    popped_order_ = e.order;
    ++processed_;
    return e;
  }

 private:
  void Insert(const Event& e) {
    assert(e.time >= now_);
    ++size_;
    int64_t bucket = e.time >> kBucketShift;
    if (bucket <= current_) {
      // In place among the bucket's remaining events (a reserved order may precede some).
      auto at_or_after =
          std::upper_bound(run_.begin() + std::ptrdiff_t(next_), run_.end(), e, EventBefore);
      run_.insert(at_or_after, e);
    } else if (bucket < current_ + kBuckets) {
      wheel_[size_t(bucket & (kBuckets - 1))].push_back(e);
      ++in_wheel_;
    } else {
      far_.Push(e);
    }
  }

  // Makes run_[next_] the earliest pending event: moves on to the next non-empty bucket.
  void Settle() {
    while (next_ == run_.size()) {
      if (in_wheel_ == 0) {
        current_ = far_.top().time >> kBucketShift;  // skip the empty stretch
      } else {
        ++current_;
      }
      run_.clear();
      next_ = 0;
      std::vector<Event>& slot = wheel_[size_t(current_ & (kBuckets - 1))];
      run_.swap(slot);  // the slot keeps the drained run's capacity
      in_wheel_ -= run_.size();
      while (!far_.empty() && (far_.top().time >> kBucketShift) == current_) {
        run_.push_back(far_.Pop());
      }
      std::sort(run_.begin(), run_.end(), EventBefore);
    }
  }

  std::array<std::vector<Event>, kBuckets> wheel_;
  std::vector<Event> run_;  // the events of bucket current_, sorted; run_[next_] is next
  size_t next_ = 0;
  EventHeap far_;  // beyond the wheel when scheduled
  int64_t current_ = 0;
  size_t in_wheel_ = 0;
  size_t size_ = 0;
  TimeNs now_ = 0;
  uint64_t next_order_ = 0;
  uint64_t popped_order_ = 0;
  uint64_t processed_ = 0;
};

}  // namespace bx::sim
