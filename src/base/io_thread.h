// IoThread: one event-loop thread of the library, the unit of both transports' threading model.
// It waits in one epoll set for the file descriptors its handlers watch and for a wake-up eventfd,
// runs the tasks application threads hand over (base/loop_tasks.h), and, when given a Poller,
// polls it as well: the rdma transport's threads poll a completion queue (engine/engine_poller.h).
//
// Without a poller the loop blocks in epoll_wait (tcp://). With one, each pass polls it, runs the
// tasks and lets the poller finish what they queued; when a pass finds no work its PollPolicy
// (base/poll_policy.h) decides whether to poll on, yielding the core each pass, or to arm the
// poller and sleep in epoll until its fd, a watched fd or a task wakes the thread.
//
// Lifetime: shared. Whatever posts to the thread or registers a handler with it (a socket, a
// connection) holds it, so nothing outlives the thread it posts to. Stop ends the loop; from the
// thread itself (a callback that destroys its transport) it does not wait, the thread keeps this
// object alive and ends after the callback returns. The poller belongs to the thread and is
// destroyed after the loop has ended.
//
// Threads: Add, Modify, Post, RunAndWait, IsCurrent, Stop, CpuNs and counters from any thread;
// Remove, Watch and Unwatch on the I/O thread (inside a handler or a posted task), or once the
// loop has ended; Debug and sanitizer builds check it (BX_DCHECK, base/dcheck.h).
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/loop_tasks.h"
#include "base/poll_policy.h"
#include "base/single_writer_counter.h"
#include "base/thread_cpu_clock.h"
#include "base/thread_sched_stat.h"
#include "bx/status.h"

namespace bx {

// Work an I/O thread finds by polling rather than through a file descriptor (a completion
// queue). Every call comes from the I/O thread.
class Poller {
 public:
  virtual ~Poller() = default;
  // Takes the work that has arrived; true when there was some. Runs before the pass's tasks, and
  // before handlers see their fds' events: work that arrived first is handled first.
  virtual bool Poll() = 0;
  // After the pass's tasks: finishes what Poll and the tasks started (one doorbell per engine
  // for the whole batch); true when it did anything.
  virtual bool Flush() = 0;
  // Whether work under way will bring more soon (a completion in flight): the policy then polls
  // longer before sleeping.
  virtual bool ExpectsWork() const = 0;
  // Before the thread sleeps: the next work makes ReadyFd() readable. Work that arrived before
  // the arm raises no event, so the thread polls once more after arming.
  virtual void Arm() = 0;
  virtual int ReadyFd() const = 0;
  // ReadyFd() was readable: takes its event (the work itself is taken by the next Poll).
  virtual void OnReady() = 0;
};

struct IoThreadOptions {
  std::string name = "bx-io";  // the thread's name (visible in top -H), at most 15 characters
  // The CPUs a set of these threads is pinned to, round robin (TransportOptions::io_cpus,
  // BX_IO_CPUS); empty: where the scheduler puts them. `cpu` is this thread's (-1: unpinned).
  std::vector<int> cpus;
  int cpu = -1;
  // With a poller only. The longest polling stretch after the last work before sleeping; 0
  // sleeps at once (lowest CPU, highest latency), a large value with `adaptive_polling` off is
  // pure busy polling.
  int busy_poll_us = 200;
  // Poll only while the gaps between work are short (see poll_policy.h); off polls for
  // busy_poll_us after every piece of work.
  bool adaptive_polling = true;
  int spin_limit_us = 20;  // adaptive: the longest predicted gap worth polling through
  // Slow passes and long waits for a CPU make the thread sleep between events for a while (see
  // poll_policy.h); off, it keeps polling beside busy threads (the earlier policy).
  bool detect_contention = true;
};

// How a polling I/O thread spent its loop, so that what polling costs can be measured (issue
// 22). Zero for a thread without a poller.
struct IoThreadCounters {
  uint64_t busy_polls = 0;    // passes that found work: completions, tasks or engines to pump
  uint64_t empty_polls = 0;   // passes that found none
  uint64_t yields = 0;        // empty passes inside the busy-poll window, each a sched_yield
  uint64_t sleeps = 0;        // times the thread armed the poller and slept in epoll
  uint64_t cq_wakeups = 0;    // sleeps ended by the poller's fd (a completion event)
  uint64_t task_wakeups = 0;  // sleeps ended by a task posted from another thread
  // Idle gaps (poll_policy.h): ended while polling, outlasting the polling, slept at once.
  uint64_t gaps_polled = 0, gaps_outlasted = 0, gaps_slept = 0;
  // Empty passes that lost the core for a scheduler slice (poll_policy.h: contention).
  uint64_t slow_passes = 0;
  // Windows whose mean wait for a CPU said busy threads share the core, the contended stretches
  // begun (by either signal), and nanoseconds the thread waited runnable for a CPU in total.
  uint64_t oversubscribed_windows = 0, contended_stretches = 0, cpu_wait_ns = 0;
  IoThreadCounters& operator+=(const IoThreadCounters& o);
  std::map<std::string, uint64_t> ToMap() const;
};

class IoThread : public std::enable_shared_from_this<IoThread> {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // The epoll events (EPOLLIN, EPOLLOUT, EPOLLERR, ...) for this handler's fd.
    virtual void OnEvents(uint32_t events) = 0;
    // The thread is stopping: release the fd and end with `reason`. Then Remove.
    virtual void Shutdown(const Status& reason) = 0;

   private:
    friend class IoThread;
    bool removed_ = false;  // I/O thread: events of its fd left in the round under way are dropped
  };

  // Creates the epoll set and starts the thread, polling `poller` when one is given.
  static Result<std::shared_ptr<IoThread>> Start(const IoThreadOptions& options,
                                                 std::unique_ptr<Poller> poller = nullptr);
  // Stops and joins the thread (when Stop was not called), then destroys the poller.
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  // Watches `fd` for `events` (level-triggered) and keeps `handler` alive until Remove. Refused
  // once the loop has ended.
  Status Add(int fd, uint32_t events, std::shared_ptr<Handler> handler);
  // Changes the events watched for `fd`.
  Status Modify(int fd, uint32_t events, Handler* handler);
  // Stops watching `fd` (before the caller closes it). Events of the round under way are not
  // delivered to it any more, and it is released after the round.
  void Remove(int fd, Handler* handler);
  // Runs `on_readable` whenever `fd` is readable or its peer hung up (a bootstrap connection),
  // until Unwatch; Stop leaves such a watch to its owner.
  Status Watch(int fd, std::function<void()> on_readable);
  void Unwatch(int fd);

  // Runs `task` on the I/O thread, in order, after the current round of events. After Stop, runs
  // it at once on the caller's thread, so work handed over is never lost (base/loop_tasks.h).
  void Post(std::function<void()> task) { tasks_.Post(std::move(task)); }
  // Runs `task` on the I/O thread and waits for it; runs it inline on the I/O thread itself.
  void RunAndWait(const std::function<void()>& task) { tasks_.RunAndWait(task); }
  bool IsCurrent() const { return tasks_.IsCurrent(); }
  // The caller is this thread, or the loop has ended (base/loop_tasks.h): what BX_DCHECKs of
  // I/O-thread-only methods ask.
  bool OnLoopOrEnded() const { return tasks_.OnLoopOrEnded(); }
  // Whether the caller is the thread of any I/O thread (where blocking on another one could
  // deadlock).
  static bool OnAnyIoThread() { return LoopTasks::OnAnyLoop(); }

  // Asks every handler to Shutdown(reason), then ends the loop (tasks already posted still run)
  // and joins the thread. Idempotent. From the I/O thread itself it does not wait.
  void Stop(const Status& reason = Aborted("I/O thread stopped"));

  // The poller given to Start (null: none). Its owner's code reaches it through this.
  Poller* poller() const { return poller_.get(); }
  // CPU time this thread has used, nanoseconds (for host-CPU-per-message accounting).
  uint64_t CpuNs() const { return cpu_clock_.Ns(); }
  // The polling loop's counters so far.
  IoThreadCounters counters() const;

 private:
  // Events taken per epoll_wait: enough that 64 busy sockets cost one system call per round.
  static constexpr int kEventsPerWait = 128;
  // epoll_event.data.ptr of the wake-up eventfd and of the poller's fd (never a handler's).
  static char wake_tag_, poller_tag_;

  IoThread(const IoThreadOptions& options, std::unique_ptr<Poller> poller);
  void Run();
  void BlockingLoop();  // no poller: epoll_wait until events or tasks
  // io_thread_polling.cc: with a poller, poll, and sleep only when the policy says so.
  void PollingLoop();
  bool PollOnce();
  void Sleep();
  void WatchSchedStat(uint64_t now_ns);
  bool HasHandlers();
  // The handlers' share of `events`; the poller sees its work first (Poller::Poll).
  void RunHandlers(const epoll_event* events, int n);
  bool RunTasks();  // true when tasks remain (posted by the tasks themselves)
  void ReleaseRemoved();
  void Wake();  // a task was posted: a sleeping thread must look
  void WakeNow();

  const IoThreadOptions options_;
  std::unique_ptr<Poller> poller_;  // reset by the destructor, after the loop
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: Post and Stop wake epoll_wait through it
  std::thread thread_;
  std::mutex join_mu_;
  std::atomic<bool> stopping_{false};     // Stop was called
  std::atomic<bool> stop_{false};         // the loop ends at its next turn
  std::shared_ptr<IoThread> keep_alive_;  // I/O thread: set when it was stopped from inside
  LoopTasks tasks_;
  std::atomic<bool> sleeping_{false};  // polling loop: in epoll_wait, a task must wake it
  ThreadCpuClock cpu_clock_;

  std::mutex mutex_;      // guards handlers_, removed_, stopped_ and watches_
  bool stopped_ = false;  // the loop has exited: Add refuses
  std::unordered_map<Handler*, std::shared_ptr<Handler>> handlers_;
  std::vector<std::shared_ptr<Handler>> removed_;  // released after the current round
  std::unordered_map<int, Handler*> watches_;      // Watch's handlers by fd

  // Polling loop only.
  PollPolicy policy_;
  ThreadSchedStat sched_stat_;
  uint64_t stat_window_start_ns_ = 0;  // the schedstat window under way (PollPolicy::OnSchedStat)
  ThreadSchedStat::Sample stat_window_start_;
  SingleWriterCounter busy_polls_, empty_polls_, yields_, sleeps_, cq_wakeups_, task_wakeups_;
};

}  // namespace bx
