// The discrete-event core: integer-nanosecond virtual time and plain event structs, popped in
// (time, order), so a run is a pure function of its seed. Single-threaded; a partitioned run has
// one queue per partition (simulation.cc).
//
// The order of events at the same time is that of their creation per node: an event's order is
// (the node that scheduled it, how many events that node had scheduled before). The scheduling
// node is the one whose event is being handled (the queue takes it from the last event popped,
// or from SetActor before the run). Every node's events therefore pop in the same order whether
// one queue holds all nodes or each partition holds some, which is what makes a run's result
// independent of its partition count.
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

  // An event at `node`, scheduled by the current actor.
  void Schedule(TimeNs at, uint32_t node, EventKind kind, uint32_t a, uint32_t b = 0) {
    Insert(Event{at, ReserveOrder(), a, b, node, kind});
  }
  // The event an actor scheduled for a node of another partition (simulation.cc hands it over).
  void Deliver(const Event& e) { Insert(e); }

  // Whose events Schedule creates until the next Pop (for events scheduled before the run).
  void SetActor(uint32_t node) { actor_ = node; }

  // An event that may turn out to be a no-op (a port's serialisation end with nothing waiting,
  // network.h) takes its place in the order now and is scheduled only if it is needed: it then
  // pops exactly where it would have, so skipping the others changes no result.
  uint64_t ReserveOrder() {
    if (actor_ >= created_.size()) created_.resize(actor_ + 1, 0);
    uint64_t count = created_[actor_]++;
    assert(count < (uint64_t(1) << kCountBits));
    return (uint64_t(actor_) << kCountBits) | count;
  }
  void ScheduleReserved(TimeNs at, uint64_t order, uint32_t node, EventKind kind, uint32_t a,
                        uint32_t b = 0) {
    assert(!Passed(at, order));
    Insert(Event{at, order, a, b, node, kind});
  }
  // The order of the event being handled (what Passed compares with).
  uint64_t popped_order() const { return popped_order_; }
  // Whether an event at (at, order) would have been popped already.
  bool Passed(TimeNs at, uint64_t order) const {
    return at < now_ || (at == now_ && order < popped_order_);
  }

  // Time of the earliest event. Requires !empty().
  TimeNs NextTime() {
    Settle();
    return run_[next_].time;
  }

  // Speed only: `observer(context, events, count)` sees each bucket's events once they are sorted,
  // before the first of them pops (to start loading what they will touch).
  using RunObserver = void (*)(void* context, const Event* events, size_t count);
  void SetRunObserver(RunObserver observer, void* context) {
    observer_ = observer;
    observer_context_ = context;
  }

  // Removes the earliest event and advances the clock to it. Requires !empty().
  Event Pop() {
    Settle();
    Event e = run_[next_++];
    --size_;
    now_ = e.time;
    popped_order_ = e.order;
    actor_ = e.node;
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
          std::upper_bound(run_.begin() + std::ptrdiff_t(next_), run_.end(), e, EventOrder());
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
      std::sort(run_.begin(), run_.end(), EventOrder());
      if (observer_ != nullptr) observer_(observer_context_, run_.data(), run_.size());
    }
  }

  std::array<std::vector<Event>, kBuckets> wheel_;
  std::vector<Event> run_;  // the events of bucket current_, sorted; run_[next_] is next
  size_t next_ = 0;
  EventHeap far_;  // beyond the wheel when scheduled
  int64_t current_ = 0;
  size_t in_wheel_ = 0;
  size_t size_ = 0;
  static constexpr int kCountBits = 40;  // events per node; nodes take the bits above
  TimeNs now_ = 0;
  uint32_t actor_ = 0;
  std::vector<uint64_t> created_;  // by node: events it has scheduled
  uint64_t popped_order_ = 0;
  uint64_t processed_ = 0;
  RunObserver observer_ = nullptr;
  void* observer_context_ = nullptr;
};

}  // namespace bx::sim
