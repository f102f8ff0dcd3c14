// The log sink: messages go where the program said, nowhere by default, and the sink can be
// replaced while other threads log.
#include "bx/log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bx {
namespace {

TEST(LogTest, MessagesReachTheSinkAndNothingReachesStderrWithoutOne) {
  std::vector<std::pair<LogLevel, std::string>> seen;
  SetLogSink([&](LogLevel level, std::string_view message) {
    seen.emplace_back(level, std::string(message));
  });
  Log(LogLevel::kWarning, "bx rdma: something to say");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, LogLevel::kWarning);
  EXPECT_EQ(seen[0].second, "bx rdma: something to say");

  SetLogSink(nullptr);
  ::testing::internal::CaptureStderr();
  Log(LogLevel::kError, "unheard");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(seen.size(), 1u);
}

TEST(LogTest, TheStderrSinkWritesOneLineFromItsLevelUp) {
  SetLogSink(StderrLogSink(LogLevel::kWarning));
  ::testing::internal::CaptureStderr();
  Log(LogLevel::kInfo, "below the level");
  Log(LogLevel::kWarning, "bx rpc: a line");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "bx rpc: a line\n");
  SetLogSink(nullptr);
  EXPECT_EQ(LogLevelName(LogLevel::kError), "error");
}

TEST(LogTest, TheSinkMayBeReplacedWhileOtherThreadsLog) {
  std::atomic<int> hits[2] = {0, 0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> loggers;
  for (int i = 0; i < 3; ++i) {
    loggers.emplace_back([&] {
      while (!stop) Log(LogLevel::kInfo, "m");
    });
  }
  // Each sink in turn until the loggers have reached it (a data race or a call into a replaced
  // sink shows under TSan and ASan).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool reached = true;
  for (int round = 0; round < 100 && reached; ++round) {
    std::atomic<int>& hit = hits[round % 2];
    const int before = hit.load();
    SetLogSink([&hit](LogLevel, std::string_view) { ++hit; });
    while (hit.load() == before && (reached = std::chrono::steady_clock::now() < deadline)) {
      std::this_thread::yield();
    }
  }
  stop = true;
  for (std::thread& t : loggers) t.join();
  SetLogSink(nullptr);
  EXPECT_TRUE(reached) << "a sink set was never called";
}

// A program may destroy what its sink captured once SetLogSink returns: the replaced sink is not
// running on any thread by then (AuthTest's sink once ran on past its test under TSan).
TEST(LogTest, ReplacingTheSinkWaitsForTheCallsStillInIt) {
  std::mutex mu;
  std::condition_variable changed;
  bool inside = false, released = false, left = false, returned = false;  // guarded by mu
  SetLogSink([&](LogLevel, std::string_view) {
    std::unique_lock lock(mu);
    inside = true;
    changed.notify_all();
    changed.wait(lock, [&] { return released; });
    left = true;
  });
  std::thread logger([] { Log(LogLevel::kInfo, "held in the sink"); });
  {
    std::unique_lock lock(mu);
    changed.wait(lock, [&] { return inside; });
  }
  bool left_when_returned = false;
  std::thread replacer([&] {
    SetLogSink(nullptr);
    std::lock_guard lock(mu);
    returned = true;
    left_when_returned = left;
    changed.notify_all();
  });
  {
    // Without the wait, the replacer returns at once; with it, this times out.
    std::unique_lock lock(mu);
    changed.wait_for(lock, std::chrono::milliseconds(300), [&] { return returned; });
    released = true;
    changed.notify_all();
  }
  logger.join();
  replacer.join();
  EXPECT_TRUE(left_when_returned) << "SetLogSink returned while the old sink still ran";
}

// A sink may replace itself (it cannot wait for itself) and the next message goes to the new one.
TEST(LogTest, ASinkThatReplacesItselfGoesOn) {
  int first = 0, second = 0;
  SetLogSink([&](LogLevel, std::string_view) {
    ++first;
    SetLogSink([&](LogLevel, std::string_view) { ++second; });
  });
  Log(LogLevel::kInfo, "to the first");
  Log(LogLevel::kInfo, "to the second");
  SetLogSink(nullptr);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
}

}  // namespace
}  // namespace bx
