#include "base/poll_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace bx {
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

// Waits for a completion in flight are predicted apart from idle gaps, with a higher limit: a
// fragment's short wait is polled even while idle gaps are slept through, and neither kind of
// wait teaches the other's prediction.
TEST(PollPolicyTest, AShortWaitForACompletionIsPolledWhileIdleGapsAreSlept) {
  PollPolicy policy(Adaptive());
  uint64_t t = 1'000'000;
  Gaps(policy, t, 150 * kUs, 10);  // idle waits are long: they are slept through
  ASSERT_EQ(PollingStretch(policy, t), 0u);
  const uint64_t idle_prediction = policy.predicted_gap_ns();
  for (int i = 0; i < 20; ++i) {  // completions come 30 us after each post
    ASSERT_TRUE(policy.KeepPolling(t, /*completion_expected=*/true));
    t += 30 * kUs;
    policy.OnWork(t);
    t += kUs;
  }
  EXPECT_NEAR(double(policy.predicted_completion_ns()), double(30 * kUs), double(2 * kUs));
  EXPECT_EQ(policy.predicted_gap_ns(), idle_prediction);
  const uint64_t start = t;
  while (policy.KeepPolling(t, /*completion_expected=*/true)) t += 100;
  EXPECT_NEAR(double(t - start), double(60 * kUs), double(2 * kUs));
}

// Waits for a completion that run long (a big transfer, or a completion that waits for a core
// the pollers hold) are slept through, as long idle gaps are: polling through each one, as the
// thread did before, is what kept a loaded host's rpc open loop stalled. One in 16 is probed.
TEST(PollPolicyTest, LongWaitsForACompletionAreSleptThrough) {
  PollPolicy policy(Adaptive());
  uint64_t t = 1'000'000;
  for (int i = 0; i < 10; ++i) {  // each wait outlasts its polling
    while (policy.KeepPolling(t, /*completion_expected=*/true)) t += 100;
    t += 300 * kUs;
    policy.OnWork(t);
    t += kUs;
  }
  EXPECT_GT(policy.predicted_completion_ns(), 50 * kUs);
  int polled = 0;
  for (int i = 0; i < 32; ++i) {
    if (policy.KeepPolling(t, /*completion_expected=*/true)) ++polled;
    while (policy.KeepPolling(t, /*completion_expected=*/true)) t += 100;
    t += 300 * kUs;
    policy.OnWork(t);
    t += kUs;
  }
  EXPECT_EQ(polled, 2) << "only the probes";
}

// One idle gap as an I/O thread lives it: work comes `gap` after the thread goes idle; found at
// once while polling, `wake_latency` later when the thread slept. Returns whether it slept.
bool LiveGap(PollPolicy& policy, uint64_t& t, uint64_t gap, uint64_t wake_latency) {
  const uint64_t start = t;
  bool slept = false;
  while (t < start + gap) {
    if (!policy.KeepPolling(t)) {
      slept = true;
      break;
    }
    t += 100;
  }
  t = slept ? start + gap + wake_latency : start + gap;
  policy.OnWork(t);
  t += kUs;
  return slept;
}

TEST(PollPolicyTest, ShortGapsAreFoundAgainAlthoughSleepsMakeThemLookLong) {
  PollPolicy policy(Adaptive());
  uint64_t t = 1'000'000;
  for (int i = 0; i < 20; ++i) LiveGap(policy, t, 300 * kUs, 30 * kUs);  // quiet: sleeping
  LiveGap(policy, t, 10'000 * kUs, 30 * kUs);  // ten seconds of nothing: capped like the rest
  ASSERT_TRUE(LiveGap(policy, t, 5 * kUs, 30 * kUs));
  // Gaps are 5 us now, but each slept one measures 35 us: only the probes can tell.
  int slept = 0;
  for (int i = 0; i < 200; ++i) slept += LiveGap(policy, t, 5 * kUs, 30 * kUs) ? 1 : 0;
  EXPECT_LT(slept, 60) << "polling must come back";
  int slept_late = 0;
  for (int i = 0; i < 50; ++i) slept_late += LiveGap(policy, t, 5 * kUs, 30 * kUs) ? 1 : 0;
  EXPECT_EQ(slept_late, 0);
}

TEST(PollPolicyTest, WhileSleepingOneGapInSixteenIsProbed) {
  PollPolicy policy(Adaptive());
  uint64_t t = 1'000'000;
  for (int i = 0; i < 20; ++i) LiveGap(policy, t, 300 * kUs, 30 * kUs);
  int polled = 0;
  for (int i = 0; i < 64; ++i) polled += PollingStretch(policy, t) > 0 ? 1 : 0;
  EXPECT_EQ(polled, 4);
}

// A pass that lost the core for a scheduler slice (another busy thread shares it): the gap under
// way stops polling, and so does every gap for the contended stretch, even one that waits for a
// completion in flight; after it, polling comes back. Fast passes change nothing.
TEST(PollPolicyTest, ASlowPassSleepsThroughTheContendedStretch) {
  PollPolicyOptions o = Adaptive();
  o.slow_pass_ns = 1000 * kUs;
  o.contended_ns = 5 * 1000 * kUs;
  PollPolicy policy(o);
  uint64_t t = 1'000'000;
  Gaps(policy, t, 8 * kUs, 30);  // short gaps: polled
  ASSERT_TRUE(policy.KeepPolling(t, /*completion_expected=*/true));
  policy.OnEmptyPass(t, t + 2 * kUs);  // an ordinary pass
  t += 2 * kUs;
  EXPECT_TRUE(policy.KeepPolling(t, true));
  EXPECT_EQ(policy.slow_passes(), 0u);

  policy.OnEmptyPass(t, t + 3000 * kUs);  // the yield came back 3 ms later
  t += 3000 * kUs;
  EXPECT_EQ(policy.slow_passes(), 1u);
  EXPECT_FALSE(policy.KeepPolling(t, true)) << "the gap under way kept polling";
  policy.OnWork(t);
  t += kUs;
  EXPECT_FALSE(policy.KeepPolling(t, true)) << "a gap in the contended stretch was polled";
  policy.OnWork(t + 5 * kUs);
  t += 5 * 1000 * kUs;  // the stretch is over
  EXPECT_TRUE(policy.KeepPolling(t, true));
  EXPECT_EQ(policy.slow_passes(), 1u);
}

// The thread's scheduler statistics: a window whose turns on a CPU came after a long mean wait
// (a thread that does not yield shares the core) starts a contended stretch without a slow pass;
// many short waits adding up to the same total (our own threads taking turns) do not, nor does a
// window without a turn. With detection off neither signal counts.
TEST(PollPolicyTest, LongWaitsForACpuSleepThroughTheContendedStretch) {
  for (bool detect : {true, false}) {
    PollPolicyOptions o = Adaptive();
    o.oversubscribed_wait_ns = 250 * kUs;
    o.contended_ns = 5 * 1000 * kUs;
    o.detect_contention = detect;
    PollPolicy policy(o);
    uint64_t t = 1'000'000;
    Gaps(policy, t, 8 * kUs, 30);
    policy.OnSchedStat(t, 1500 * kUs, 100);  // 15 us a turn: our own threads
    policy.OnSchedStat(t, 1500 * kUs, 0);    // no turn: says nothing
    EXPECT_TRUE(policy.KeepPolling(t, true));
    EXPECT_EQ(policy.oversubscribed_windows(), 0u);
    policy.OnSchedStat(t, 1500 * kUs, 2);  // 750 us a turn: a busy thread's slice
    EXPECT_EQ(policy.oversubscribed_windows(), detect ? 1u : 0u);
    EXPECT_EQ(policy.contended_stretches(), detect ? 1u : 0u);
    EXPECT_EQ(policy.KeepPolling(t + kUs, true), !detect) << "detect " << detect;
    policy.OnWork(t + 2 * kUs);
    t += 3 * kUs;
    EXPECT_EQ(policy.KeepPolling(t, true), !detect) << "a gap in the stretch, detect " << detect;
    policy.OnWork(t + kUs);
    t += 5 * 1000 * kUs;  // the stretch is over
    EXPECT_TRUE(policy.KeepPolling(t, true));
  }
}

// A host that stays busy: every probe after a contended stretch loses a slice again. Each slow
// pass soon after a stretch ended doubles the next stretch (up to the maximum), so the slices lost
// to probing fall from one per 5 ms to one per max_contended_ns; a slow pass long after the last
// stretch starts again from contended_ns.
TEST(PollPolicyTest, ContentionThatLastsLengthensTheStretches) {
  PollPolicyOptions o = Adaptive();
  o.slow_pass_ns = 1000 * kUs;
  o.contended_ns = 5 * 1000 * kUs;
  o.max_contended_ns = 40 * 1000 * kUs;
  PollPolicy policy(o);
  uint64_t t = 1'000'000;
  Gaps(policy, t, 8 * kUs, 30);
  // How long the gaps are slept through after a slow pass at t (probing with a gap every 100 us).
  auto stretch_after_slow_pass = [&] {
    ASSERT_TRUE(policy.KeepPolling(t, true));
    policy.OnEmptyPass(t, t + 3000 * kUs);
    t += 3000 * kUs;
    policy.OnWork(t);
  };
  auto slept_for = [&] {
    const uint64_t start = t;
    while (!policy.KeepPolling(t, true)) {
      t += 100 * kUs;
      policy.OnWork(t);
    }
    return (t - start) / (1000 * kUs);  // milliseconds, rounded down
  };
  std::vector<uint64_t> stretches;
  for (int i = 0; i < 5; ++i) {
    stretch_after_slow_pass();
    stretches.push_back(slept_for());
  }
  EXPECT_EQ(stretches, (std::vector<uint64_t>{5, 10, 20, 40, 40}));
  // Quiet for long, then short waits for completions again: contention starts short again.
  t += 500 * 1000 * kUs;
  policy.OnWork(t);
  for (int i = 0; i < 100; ++i) {  // (sleeping, it learns from one gap in 16)
    policy.KeepPolling(t, true);
    t += 8 * kUs;
    policy.OnWork(t);
  }
  stretch_after_slow_pass();
  EXPECT_EQ(slept_for(), 5u);
}

}  // namespace
}  // namespace bx
