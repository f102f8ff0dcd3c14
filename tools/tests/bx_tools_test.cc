// The plain functions behind bx's output: the demo table's comparison labels, the
// limiter of repeated error lines, and the causes of a failed connect.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "demo_format.h"
#include "ps_reach.h"
#include "repeat_limiter.h"

namespace bx::tools {
namespace {

using namespace std::chrono_literals;

TEST(DemoFormatTest, AFallInRequestsPerSecondIsALoss) {
  // The demo printed "-26.2% (gain)" for RDMA 738 against TCP 1000 requests/s.
  EXPECT_EQ(Gain(738, 1000), "-26.2% (loss)");
  EXPECT_EQ(Gain(1250, 1000), "+25.0% (gain)");
  EXPECT_EQ(Gain(1000, 1000), "+0.0%");
  EXPECT_EQ(Gain(999.9999, 1000), "+0.0%");
  EXPECT_EQ(Gain(5, 0), "n/a");
}

TEST(DemoFormatTest, AReductionIsPositiveWhenRdmaIsLower) {
  EXPECT_EQ(Reduction(75, 100), "+25.0%");
  EXPECT_EQ(Reduction(130, 100), "-30.0%");
  EXPECT_EQ(Reduction(1, 0), "n/a");
}

TEST(RepeatLimiterTest, RepeatsOfOneKindBecomeOneLineAPeriod) {
  std::vector<std::string> lines;
  RepeatLimiter limiter([&](const std::string& line) { lines.push_back(line); }, 1s);
  const auto t0 = RepeatLimiter::Clock::now();
  // A thousand failed pushes in the first second, differing only in their keys.
  for (int i = 0; i < 1000; ++i) {
    limiter.Report("push of key " + std::to_string(i) + " failed: UNAVAILABLE", t0 + i * 1ms);
  }
  limiter.Flush(t0 + 500ms);  // the period has not ended: nothing yet
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "push of key 0 failed: UNAVAILABLE");
  limiter.Flush(t0 + 1s);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "repeated 999 times in the last 1.0 s: push of key 999 failed: UNAVAILABLE");
  // Another kind is printed at once; the end of the run flushes what is counted.
  limiter.Report("fetch failed: DEADLINE_EXCEEDED", t0 + 1100ms);
  limiter.Report("push of key 5 failed: UNAVAILABLE", t0 + 1200ms);
  limiter.Flush(t0 + 1300ms, /*all=*/true);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2], "fetch failed: DEADLINE_EXCEEDED");
  EXPECT_EQ(lines[3], "repeated once in the last 0.3 s: push of key 5 failed: UNAVAILABLE");
  // Quiet for a period: the next one is printed whole again.
  limiter.Report("push of key 7 failed: UNAVAILABLE", t0 + 3s);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[4], "push of key 7 failed: UNAVAILABLE");
}

TEST(RepeatLimiterTest, KindsIgnoreNumbers) {
  EXPECT_EQ(RepeatLimiter::KindOf("tcp://10.0.0.2:7001 down after 12 ms"),
            "tcp://#.#.#.#:# down after # ms");
}

TEST(PsReachTest, ConnectFailuresAreNamedByCause) {
  EXPECT_EQ(ConnectFailureCause(Status(StatusCode::kUnavailable,
                                       "connect tcp://127.0.0.1:1: connect: Connection refused "
                                       "(errno 111)"),
                                3s),
            "connection refused (nothing listens there)");
  EXPECT_EQ(ConnectFailureCause(Status(StatusCode::kFailedPrecondition,
                                       "refused by tcp://h:1: peer failed authentication (the "
                                       "accepting side requires auth_secret)"),
                                3s),
            "authentication refused (the accepting side requires auth_secret)");
  EXPECT_EQ(ConnectFailureCause(Status(StatusCode::kDeadlineExceeded, "connect"), 3s),
            "no answer within 3.0 s (timeout)");
}

}  // namespace
}  // namespace bx::tools
