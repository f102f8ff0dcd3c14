// The polling half of IoThread (io_thread.h): the loop of a thread with a Poller, its sleep, and
// what it counts.
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "base/io_thread.h"

namespace bx {
namespace {

// Watched descriptors are checked every this many idle polls while polling (a system call).
constexpr int kWatchCheckInterval = 1024;
// The thread's schedstat is read once per this much time awake (a pread of a procfs file).
constexpr uint64_t kSchedStatWindowNs = 2'000'000;

uint64_t NowNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

bool IoThread::HasHandlers() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !handlers_.empty();
}

bool IoThread::PollOnce() {
  bool worked = poller_->Poll();
  if (tasks_.HasPending()) {
    tasks_.RunPending();
    ReleaseRemoved();
    worked = true;
  }
  // After the whole batch, so the work it freed goes out in one doorbell per engine.
  worked |= poller_->Flush();
  return worked;
}

void IoThread::Sleep() {
  sleeping_.store(true, std::memory_order_seq_cst);
  poller_->Arm();
  // Anything that arrived before the poller was armed raises no event: look once more.
  if (tasks_.HasPending()) {
    sleeping_.store(false);
    return;
  }
  if (poller_->Poll()) {
    sleeping_.store(false);
    policy_.OnWork(NowNs());
    return;
  }
  if (stop_.load()) {
    sleeping_.store(false);
    return;
  }
  sleeps_.Add();
  epoll_event events[kEventsPerWait];
  const int n = epoll_wait(epoll_fd_, events, kEventsPerWait, -1);
  sleeping_.store(false, std::memory_order_seq_cst);
  epoll_event handler_events[kEventsPerWait];
  int handler_count = 0;
  bool ready = false;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.ptr == &wake_tag_) {
      uint64_t value;
      while (read(wake_fd_, &value, sizeof(value)) < 0 && errno == EINTR) {
      }
      task_wakeups_.Add();
    } else if (events[i].data.ptr == &poller_tag_) {
      ready = true;
      cq_wakeups_.Add();
    } else {
      handler_events[handler_count++] = events[i];
    }
  }
  if (ready) poller_->OnReady();
  if (handler_count > 0) {
    RunHandlers(handler_events, handler_count);
    ReleaseRemoved();
  }
}

// Every kSchedStatWindowNs, what the thread waited for a CPU goes to the policy, read after the
// pass's work (never between a completion and its delivery). A window may span sleeps: a woken
// thread that waits long for a CPU shares it with busy threads as much as a polling one does.
void IoThread::WatchSchedStat(uint64_t now_ns) {
  if (now_ns - stat_window_start_ns_ < kSchedStatWindowNs) return;
  const ThreadSchedStat::Sample now = sched_stat_.Read();
  policy_.OnSchedStat(now_ns, now.waited_ns - stat_window_start_.waited_ns,
                      now.turns - stat_window_start_.turns);
  stat_window_start_ns_ = now_ns;
  stat_window_start_ = now;
}

void IoThread::PollingLoop() {
  sched_stat_.CaptureCurrentThread();
  int idle_polls = 0;
  // Where the pass under way began: the end of the one before (its clock reading reused, so a
  // pass costs no extra clock read), or the wake-up after a sleep.
  uint64_t pass_start = NowNs();
  stat_window_start_ns_ = pass_start;
  stat_window_start_ = sched_stat_.Read();
  while (!stop_.load(std::memory_order_acquire)) {
    if (PollOnce()) {
      busy_polls_.Add();
      pass_start = NowNs();
      policy_.OnWork(pass_start);
      WatchSchedStat(pass_start);
      idle_polls = 0;
      continue;
    }
    empty_polls_.Add();
    if (++idle_polls % kWatchCheckInterval == 0 && HasHandlers()) {
      epoll_event events[kEventsPerWait];
      const int n = epoll_wait(epoll_fd_, events, kEventsPerWait, 0);
      if (n > 0) {
        RunHandlers(events, n);
        ReleaseRemoved();
      }
    }
    if (policy_.KeepPolling(NowNs(), poller_->ExpectsWork())) {
      // Polling that yields: free when the core is ours alone, and it does not starve the thread
      // (application, peer, NIC) whose work we are waiting for when cores are scarce. When the
      // yield cost a scheduler slice, the policy sleeps through the next gaps instead.
      yields_.Add();
      std::this_thread::yield();
      const uint64_t pass_end = NowNs();
      policy_.OnEmptyPass(pass_start, pass_end);
      WatchSchedStat(pass_end);
      pass_start = pass_end;
      continue;
    }
    Sleep();
    pass_start = NowNs();
  }
}

IoThreadCounters& IoThreadCounters::operator+=(const IoThreadCounters& o) {
  busy_polls += o.busy_polls;
  empty_polls += o.empty_polls;
  yields += o.yields;
  sleeps += o.sleeps;
  cq_wakeups += o.cq_wakeups;
  task_wakeups += o.task_wakeups;
  gaps_polled += o.gaps_polled;
  gaps_outlasted += o.gaps_outlasted;
  gaps_slept += o.gaps_slept;
  slow_passes += o.slow_passes;
  oversubscribed_windows += o.oversubscribed_windows;
  contended_stretches += o.contended_stretches;
  cpu_wait_ns += o.cpu_wait_ns;
  return *this;
}

std::map<std::string, uint64_t> IoThreadCounters::ToMap() const {
  return {{"io_busy_polls", busy_polls},
          {"io_empty_polls", empty_polls},
          {"io_yields", yields},
          {"io_sleeps", sleeps},
          {"io_cq_wakeups", cq_wakeups},
          {"io_task_wakeups", task_wakeups},
          {"io_gaps_polled", gaps_polled},
          {"io_gaps_outlasted", gaps_outlasted},
          {"io_gaps_slept", gaps_slept},
          {"io_slow_passes", slow_passes},
          {"io_oversubscribed_windows", oversubscribed_windows},
          {"io_contended_stretches", contended_stretches},
          {"io_cpu_wait_ns", cpu_wait_ns}};
}

IoThreadCounters IoThread::counters() const {
  IoThreadCounters c;
  c.busy_polls = busy_polls_.Get();
  c.empty_polls = empty_polls_.Get();
  c.yields = yields_.Get();
  c.sleeps = sleeps_.Get();
  c.cq_wakeups = cq_wakeups_.Get();
  c.task_wakeups = task_wakeups_.Get();
  c.gaps_polled = policy_.polled_gaps();
  c.gaps_outlasted = policy_.outlasted_gaps();
  c.gaps_slept = policy_.slept_gaps();
  c.slow_passes = policy_.slow_passes();
  c.oversubscribed_windows = policy_.oversubscribed_windows();
  c.contended_stretches = policy_.contended_stretches();
  c.cpu_wait_ns = sched_stat_.Read().waited_ns;
  return c;
}

}  // namespace bx
