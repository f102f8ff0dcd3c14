// IoThread: one thread that owns a completion queue shared by its engines (paper section 6's
// thread domains: no two threads touch the same CQ or QP). It polls the CQ, dispatches each
// completion to its engine by QP number, pumps the engines that have new work, and runs tasks
// that application threads hand over. When a pass finds no work, its PollPolicy decides whether
// to poll on (yielding the core each pass) or to arm the CQ and sleep in epoll on the completion
// channel and a wake-up eventfd; it also watches file descriptors (bootstrap connections) for
// their owners.
//
// Lifetime: shared. Whatever posts to the thread (a connection, a socket) holds it, so no socket
// outlives the thread it posts to; tasks keep base/loop_tasks.h's rules (never lost, RunAndWait
// inline on the thread itself). The owner calls Stop(); from the thread itself (a callback that
// destroys its transport) Stop does not wait, and the thread ends after the callback returns.
// The thread's protection domain (a parent domain with its thread domain, when the device has
// them) belongs to it and goes after every QP in it.
//
// Threads: Post, RunAndWait, IsCurrent and Stop from any thread; everything else on the I/O thread.
#pragma once

#include <sys/epoll.h>
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/loop_tasks.h"
#include "base/single_writer_counter.h"
#include "base/thread_cpu_clock.h"
#include "base/thread_sched_stat.h"
#include "bx/status.h"
#include "engine/engine.h"
#include "engine/poll_policy.h"
#include "verbs/verbs.h"

namespace bx::engine {

struct IoThreadOptions {
  int cq_entries = 65536;  // completions of all engines on this thread
  // The longest polling stretch after the last work before sleeping; 0 sleeps at once (lowest
  // CPU, highest latency), a large value with `adaptive_polling` off is pure busy polling.
  int busy_poll_us = 200;
  // Poll only while the gaps between work are short (see poll_policy.h); off polls for
  // busy_poll_us after every piece of work.
  bool adaptive_polling = true;
  int spin_limit_us = 20;  // adaptive: the longest predicted gap worth polling through
  // Slow passes and long waits for a CPU make the thread sleep between events for a while (see
  // poll_policy.h); off, it keeps polling beside busy threads (the policy before issue 47).
  bool detect_contention = true;
  std::string name = "bx-io";
  // The CPUs a set of these threads is pinned to, round robin (TransportOptions::io_cpus,
  // BX_IO_CPUS); empty: where the scheduler puts them. `cpu` is this thread's (-1: unpinned).
  std::vector<int> cpus;
  int cpu = -1;
};

// How an I/O thread spent its loop, so that what polling costs can be measured (issue 22).
struct IoThreadCounters {
  uint64_t busy_polls = 0;    // passes that found work: completions, tasks or engines to pump
  uint64_t empty_polls = 0;   // passes that found none
  uint64_t yields = 0;        // empty passes inside the busy-poll window, each a sched_yield
  uint64_t sleeps = 0;        // times the thread armed the CQ and slept in epoll
  uint64_t cq_wakeups = 0;    // sleeps ended by a completion event
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
  // `pd`: the device's protection domain, parent of this thread's own domain (null: none).
  static Result<std::shared_ptr<IoThread>> Create(verbs::Library& lib, ibv_context* context,
                                                  ibv_pd* pd, const IoThreadOptions& options);
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  ibv_cq* cq() const { return cq_; }
  ibv_td* td() const { return td_; }  // the thread domain QPs of this thread may be created in
  // Where this thread's QPs are created: a parent domain carrying td(), or `pd` from Create when
  // the device has no thread or parent domains.
  ibv_pd* pd() const { return domain_ != nullptr ? domain_ : device_pd_; }
  bool has_own_domain() const { return domain_ != nullptr; }

  // Any thread: runs `task` on the I/O thread, in order; once stopped, on the caller at once.
  void Post(std::function<void()> task) { tasks_.Post(std::move(task)); }
  // Any thread: runs `task` on the I/O thread and waits for it; inline on the thread itself.
  void RunAndWait(const std::function<void()>& task) { tasks_.RunAndWait(task); }
  bool IsCurrent() const { return tasks_.IsCurrent(); }
  // Ends the loop (tasks already posted still run) and joins the thread; idempotent.
  void Stop();

  // I/O thread only.
  void AddEngine(Engine* engine);
  void RemoveEngine(Engine* engine);
  void MarkDirty(Engine* engine);
  void Watch(int fd, std::function<void()> on_readable);
  void Unwatch(int fd);

  // CPU time this thread has used, nanoseconds (for host-CPU-per-message accounting).
  uint64_t CpuNs() const { return cpu_clock_.Ns(); }
  // Any thread: the loop's counters so far.
  IoThreadCounters counters() const;

 private:
  IoThread(verbs::Library& lib, const IoThreadOptions& options)
      : lib_(lib), options_(options), tasks_([this] { Wake(); }), policy_(PolicyOptions(options)) {}
  static PollPolicyOptions PolicyOptions(const IoThreadOptions& options);
  void Loop();
  void Wake();  // a task was posted: a sleeping thread must look
  bool PollOnce();
  int DrainCompletions();
  void RunWatched(const epoll_event* events, int n);
  void Sleep();
  bool RunTasks();

  verbs::Library& lib_;
  IoThreadOptions options_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_td* td_ = nullptr;
  ibv_pd* device_pd_ = nullptr;
  ibv_pd* domain_ = nullptr;  // the parent domain, owned
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::shared_ptr<IoThread> keep_alive_;  // I/O thread: set when it was stopped from inside
  ThreadCpuClock cpu_clock_;
  ThreadSchedStat sched_stat_;
  // The schedstat window under way (poll_policy.h: OnSchedStat).
  uint64_t stat_window_start_ns_ = 0;
  ThreadSchedStat::Sample stat_window_start_;
  void WatchSchedStat(uint64_t now_ns);

  LoopTasks tasks_;
  std::atomic<bool> sleeping_{false};

  PollPolicy policy_;
  SingleWriterCounter busy_polls_, empty_polls_, yields_, sleeps_, cq_wakeups_, task_wakeups_;

  // Re-reads `engine`'s ExpectsCompletion after it did work, keeping expecting_ in step.
  void Recount(Engine* engine);

  std::unordered_map<uint32_t, Engine*> engines_;
  int expecting_ = 0;  // engines whose last reading expected a completion
  std::vector<Engine*> dirty_;
  std::unordered_map<int, std::function<void()>> watched_;
};

}  // namespace bx::engine
