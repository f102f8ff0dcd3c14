#include "engine/poll_policy.h"

#include <gtest/gtest.h>

namespace bx::engine {
namespace {

constexpr uint64_t kUs = 1000;

PollPolicyOptions Adaptive() {
  PollPolicyOptions o;
  o.adaptive = true;
  o.max_spin_ns = 200 * kUs;
  o.spin_limit_ns = 20 * kUs;
  return o;
}

// Feeds `count` idle gaps of `gap` each: the thread goes idle at t, work comes at t + gap.
void Gaps(PollPolicy& policy, uint64_t& t, uint64_t gap, int count) {
  for (int i = 0; i < count; ++i) {
    policy.KeepPolling(t);
    t += gap;
    policy.OnWork(t);
    t += kUs;  // a microsecond of work before the next gap
  }
}

// How long the policy would poll a new gap before sleeping.
uint64_t PollingStretch(PollPolicy& policy, uint64_t& t) {
  const uint64_t start = t;
  while (policy.KeepPolling(t)) t += 100;
  const uint64_t stretch = t - start;
  policy.OnWork(t);  // the gap ends (after a sleep)
  t += kUs;
  return stretch;
}

TEST(PollPolicyTest, FixedPollsForTheWholeStretchWhateverTheGaps) {
  PollPolicyOptions o = Adaptive();
  o.adaptive = false;
  PollPolicy policy(o);
  uint64_t t = 1'000'000;
  Gaps(policy, t, 5 * 1000 * kUs, 20);  // long idle stretches change nothing
  EXPECT_NEAR(double(PollingStretch(policy, t)), double(200 * kUs), 200.0);
}

TEST(PollPolicyTest, ShortGapsArePolledForAboutTwiceTheirLength) {
  PollPolicy policy(Adaptive());
  uint64_t t = 1'000'000;
  Gaps(policy, t, 8 * kUs, 30);
  EXPECT_NEAR(double(policy.predicted_gap_ns()), double(8 * kUs), double(kUs));
  EXPECT_NEAR(double(PollingStretch(policy, t)), double(16 * kUs), double(2 * kUs));
  EXPECT_EQ(policy.polled_gaps(), 30u);
}

TEST(PollPolicyTest, LongGapsAreSleptThroughAtOnce) {
  PollPolicy policy(Adaptive());
  uint64_t t = 1'000'000;
  Gaps(policy, t, 150 * kUs, 10);  // a 1 MiB transfer's wait, say
  EXPECT_GT(policy.predicted_gap_ns(), 20 * kUs);
  EXPECT_EQ(PollingStretch(policy, t), 0u);
  EXPECT_GE(policy.slept_gaps(), 9u);
}

TEST(PollPolicyTest, PollingComesBackWhenTrafficTurnsDense) {
  PollPolicy policy(Adaptive());
  uint64_t t = 1'000'000;
  Gaps(policy, t, 10 * 1000 * kUs, 5);  // seconds of quiet: capped, so recovery is quick
  ASSERT_EQ(PollingStretch(policy, t), 0u);
  Gaps(policy, t, 3 * kUs, 12);  // slept through, but measured short
  EXPECT_GT(PollingStretch(policy, t), 0u);
}

TEST(PollPolicyTest, AGapThatOutlastsThePollingIsCountedAndSlept) {
  PollPolicy policy(Adaptive());
  uint64_t t = 1'000'000;
  Gaps(policy, t, 5 * kUs, 20);
  // This gap is polled for ~10 us, then the thread sleeps; later passes without work sleep too.
  ASSERT_TRUE(policy.KeepPolling(t));
  t += 50 * kUs;
  EXPECT_FALSE(policy.KeepPolling(t));
  EXPECT_FALSE(policy.KeepPolling(t + kUs));
  EXPECT_EQ(policy.outlasted_gaps(), 1u);
  policy.OnWork(t + 2 * kUs);
  EXPECT_EQ(policy.polled_gaps(), 20u);  // the outlasted gap is not counted as polled
}

TEST(PollPolicyTest, ABusyPollStretchOfZeroNeverPolls) {
  PollPolicyOptions o = Adaptive();
  o.max_spin_ns = 0;
  PollPolicy policy(o);
  uint64_t t = 1'000'000;
  Gaps(policy, t, 2 * kUs, 10);
  EXPECT_EQ(PollingStretch(policy, t), 0u);
}

}  // namespace
}  // namespace bx::engine
