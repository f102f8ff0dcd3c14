// Repeated messages as one line a second: a client of a cluster that went away fails
// thousands of requests a second, each for the same reason. The first message of a kind is
// printed at once; its repeats are counted and summarised once per period, with the last one.
// Messages that differ only in their numbers (keys, addresses' ports, milliseconds) are one kind.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace bx::tools {

class RepeatLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  using Print = std::function<void(const std::string& line)>;

  explicit RepeatLimiter(Print print, Clock::duration period = std::chrono::seconds(1));

  // Thread-safe. Prints `message` unless one of its kind was printed less than a period ago;
  // then it is counted for the next summary.
  void Report(std::string_view message, Clock::time_point now = Clock::now());
  // Prints "repeated N times in the last T s: <last message>" ("once" for 1) for each kind with
  // repeats whose period has ended by `now`, or for all of them with `all` (the end of a run).
  void Flush(Clock::time_point now = Clock::now(), bool all = false);

  // The kind of a message: its text with every run of digits replaced by '#'.
  static std::string KindOf(std::string_view message);

 private:
  struct Kind {
    Clock::time_point printed;
    uint64_t repeats = 0;
    std::string last;
  };
  Print print_;
  Clock::duration period_;
  std::mutex mu_;
  std::map<std::string, Kind> kinds_;
};

// For the duration of a `bx ps` client command: the library's log lines go through a
// RepeatLimiter to stderr, flushed every 200 ms by a thread of its own; the destructor prints
// what is left and restores the plain stderr sink.
class RateLimitedStderrLog {
 public:
  RateLimitedStderrLog();
  ~RateLimitedStderrLog();
  RateLimitedStderrLog(const RateLimitedStderrLog&) = delete;
  RateLimitedStderrLog& operator=(const RateLimitedStderrLog&) = delete;

  RepeatLimiter& limiter() { return limiter_; }

 private:
  RepeatLimiter limiter_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread flusher_;
};

}  // namespace bx::tools
