// ThreadSchedStat: how long one thread has waited runnable for a CPU, and how many times it got
// one (the second and third fields of /proc/<tid>/schedstat), readable from any thread.
//
// The mean wait per turn on a CPU tells who shares the core: behind our own threads, which poll
// and yield within microseconds, a turn comes within microseconds; behind a busy thread that
// never yields (a trainer's compute), it comes after that thread's slice, a millisecond or more.
// An I/O thread in the second case should sleep in the kernel rather than poll: a woken thread
// runs soon, a yielding one waits out every busy thread's slice. A read is a pread of a procfs
// file, a few microseconds, so callers read it every few milliseconds, not every pass.
#pragma once

#include <atomic>
#include <cstdint>

namespace bx {

class ThreadSchedStat {
 public:
  struct Sample {
    uint64_t waited_ns = 0;  // time runnable but not on a CPU, in total
    uint64_t turns = 0;      // times the thread was put on a CPU
  };

  ThreadSchedStat() = default;
  ~ThreadSchedStat();
  ThreadSchedStat(const ThreadSchedStat&) = delete;
  ThreadSchedStat& operator=(const ThreadSchedStat&) = delete;

  // Called on the thread to be measured, once, as it starts. False where the kernel keeps no
  // schedstat (CONFIG_SCHED_INFO off): Read() then returns zeros.
  bool CaptureCurrentThread();
  // So far; zeros before CaptureCurrentThread.
  Sample Read() const;

 private:
  std::atomic<int> fd_{-1};
};

}  // namespace bx
