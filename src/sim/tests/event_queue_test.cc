// The timing-wheel event queue pops exactly what one binary heap over (time, insertion order)
// pops, on random schedules with many ties, far-future events and interleaved pops.
#include "sim/event_queue.h"

#include <gtest/gtest.h>

#include <vector>

#include "sim/event_heap.h"
#include "sim/random.h"

namespace bx::sim {
namespace {

// Schedules in the same calls to both, pops from both, and compares every popped event.
void CompareWithHeap(uint64_t seed, TimeNs max_delay, int steps) {
  Random rng(seed);
  EventQueue queue;
  EventHeap reference;
  uint64_t order = 0;
  TimeNs now = 0;
  uint64_t popped = 0;
  for (int step = 0; step < steps; ++step) {
    // Bursts of schedules, then bursts of pops, so the queue grows and drains.
    uint64_t schedules = rng.Next() % 8;
    for (uint64_t i = 0; i < schedules; ++i) {
      uint64_t r = rng.Next();
      // Mostly near, some exactly now (ties with the bucket being drained), some far.
      TimeNs delay = r % 4 == 0 ? 0 : TimeNs(rng.Next() % uint64_t(max_delay));
      if (r % 16 == 1) delay = TimeNs(rng.Next() % (uint64_t(max_delay) * 1000));
      if (r % 8 == 2) delay = delay / 8 * 8;  // bucket boundaries and equal times
      auto a = uint32_t(rng.Next());
      queue.Schedule(now + delay, 0, EventKind::kWorkload, a, uint32_t(i));
      reference.Push(Event{now + delay, order++, a, uint32_t(i), 0, EventKind::kWorkload});
    }
    uint64_t pops = rng.Next() % 8;
    for (uint64_t i = 0; i < pops && !reference.empty(); ++i) {
      ASSERT_FALSE(queue.empty());
      Event want = reference.Pop();
      ASSERT_EQ(queue.NextTime(), want.time);
      Event got = queue.Pop();
      ASSERT_EQ(got.time, want.time) << "pop " << popped;
      ASSERT_EQ(got.order, want.order) << "pop " << popped;
      ASSERT_EQ(got.a, want.a);
      ASSERT_EQ(got.b, want.b);
      ASSERT_EQ(queue.now(), want.time);
      now = want.time;
      ++popped;
    }
  }
  while (!reference.empty()) {
    Event want = reference.Pop();
    Event got = queue.Pop();
    ASSERT_EQ(got.time, want.time);
    ASSERT_EQ(got.order, want.order);
  }
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(queue.processed(), order);
}

TEST(EventQueue, MatchesBinaryHeapWithinTheWheel) {
  for (uint64_t seed = 1; seed <= 5; ++seed) CompareWithHeap(seed, 2000, 20000);
}

TEST(EventQueue, MatchesBinaryHeapAcrossTheHorizon) {
  // Delays up to several wheel horizons: far events, empty stretches, wrap-around.
  TimeNs horizon = EventQueue::kBuckets << EventQueue::kBucketShift;
  for (uint64_t seed = 10; seed <= 14; ++seed) CompareWithHeap(seed, 3 * horizon, 20000);
}

TEST(EventQueue, TiesPopInInsertionOrder) {
  EventQueue queue;
  for (uint32_t i = 0; i < 100; ++i) queue.Schedule(5000, 0, EventKind::kWorkload, i);
  queue.Schedule(4999, 0, EventKind::kWorkload, 1000);
  EXPECT_EQ(queue.Pop().a, 1000u);
  for (uint32_t i = 0; i < 100; ++i) {
    Event e = queue.Pop();
    EXPECT_EQ(e.a, i);
    EXPECT_EQ(e.time, 5000);
    // Scheduling at now while draining: after every tie already queued.
    if (i == 50) queue.Schedule(5000, 0, EventKind::kWorkload, 2000);
  }
  EXPECT_EQ(queue.Pop().a, 2000u);
  EXPECT_TRUE(queue.empty());
}

// A reserved place in the order, scheduled late, pops where an event scheduled at reservation
// time would have; Passed says whether that place is already behind the clock.
TEST(EventQueue, ReservedEventsPopInTheirReservedPlace) {
  EventQueue queue;
  queue.Schedule(100, 0, EventKind::kWorkload, 1);
  uint64_t early = queue.ReserveOrder();   // a place after event 1, before 2 and 3
  uint64_t unused = queue.ReserveOrder();  // never scheduled: its turn passes all the same
  queue.Schedule(100, 0, EventKind::kWorkload, 2);
  queue.Schedule(100, 0, EventKind::kWorkload, 3);
  EXPECT_FALSE(queue.Passed(100, early));
  EXPECT_EQ(queue.Pop().a, 1u);
  EXPECT_FALSE(queue.Passed(100, early));
  queue.ScheduleReserved(100, early, 0, EventKind::kWorkload, 10);
  EXPECT_EQ(queue.Pop().a, 10u);  // before 2 and 3, scheduled earlier than it
  EXPECT_EQ(queue.Pop().a, 2u);
  EXPECT_TRUE(queue.Passed(100, unused));  // event 2 came after that place
  EXPECT_FALSE(queue.Passed(100, queue.ReserveOrder()));
  EXPECT_TRUE(queue.Passed(99, queue.ReserveOrder()));
  EXPECT_EQ(queue.Pop().a, 3u);
  EXPECT_TRUE(queue.empty());
}

}  // namespace
}  // namespace bx::sim
