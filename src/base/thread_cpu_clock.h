// ThreadCpuClock: the CPU time of one thread, readable from any thread. The simnic reports its
// hardware threads' CPU apart with it, and I/O threads report theirs, so that host CPU per message
// can be measured honestly. Header-only: the simnic library links nothing else of ours.
#pragma once

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdint>

namespace bx {

class ThreadCpuClock {
 public:
  // Called on the thread to be measured, once, as it starts.
  void CaptureCurrentThread() {
    clockid_t clock;
    pthread_getcpuclockid(pthread_self(), &clock);
    clock_plus_one_.store(uint64_t(clock) + 1, std::memory_order_release);
  }
  bool captured() const { return clock_plus_one_.load(std::memory_order_acquire) != 0; }
  // CPU nanoseconds the thread has used; 0 before CaptureCurrentThread.
  uint64_t Ns() const {
    uint64_t clock = clock_plus_one_.load(std::memory_order_acquire);
    return clock == 0 ? 0 : Read(clockid_t(clock - 1));
  }
  // CPU nanoseconds the calling thread has used (a system call: no vDSO for CPU clocks).
  static uint64_t CallingThreadNs() { return Read(CLOCK_THREAD_CPUTIME_ID); }

 private:
  static uint64_t Read(clockid_t clock) {
    timespec ts;
    if (clock_gettime(clock, &ts) != 0) return 0;
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
  }

  std::atomic<uint64_t> clock_plus_one_{0};  // 0: not captured yet
};

}  // namespace bx
