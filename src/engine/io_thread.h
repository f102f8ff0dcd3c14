// IoThread: one thread that owns a completion queue shared by its engines (paper section 6's
// thread domains: no two threads touch the same CQ or QP). It polls the CQ, dispatches each
// completion to its engine by QP number, pumps the engines that have new work, and runs tasks
// that application threads hand over. After `busy_poll_us` without work it arms the CQ and sleeps
// in epoll on the completion channel and a wake-up eventfd; it also watches file descriptors
// (bootstrap connections) for their owners.
//
// Threads: Post() and Stop() from any thread; everything else on the I/O thread itself.
#pragma once

#include <sys/epoll.h>
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/thread_cpu_clock.h"
#include "bx/status.h"
#include "engine/engine.h"
#include "verbs/verbs.h"

namespace bx::engine {

struct IoThreadOptions {
  int cq_entries = 65536;  // completions of all engines on this thread
  // How long to keep polling after the last work before sleeping; 0 sleeps at once (lowest CPU,
  // highest latency), a large value is pure busy polling.
  int busy_poll_us = 200;
  std::string name = "bx-io";
};

class IoThread {
 public:
  static Result<std::unique_ptr<IoThread>> Create(verbs::Library& lib, ibv_context* context,
                                                  const IoThreadOptions& options);
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  ibv_cq* cq() const { return cq_; }
  ibv_td* td() const { return td_; }  // the thread domain QPs of this thread may be created in

  // Any thread: runs `task` on the I/O thread, in order.
  void Post(std::function<void()> task);
  // Any thread: runs `task` on the I/O thread and waits for it (not from the I/O thread).
  void Run(std::function<void()> task);
  bool InThread() const { return std::this_thread::get_id() == thread_.get_id(); }
  void Stop();

  // I/O thread only.
  void AddEngine(Engine* engine);
  void RemoveEngine(Engine* engine);
  void MarkDirty(Engine* engine);
  void Watch(int fd, std::function<void()> on_readable);
  void Unwatch(int fd);

  // CPU time this thread has used, nanoseconds (for host-CPU-per-message accounting).
  uint64_t CpuNs() const { return cpu_clock_.Ns(); }

 private:
  IoThread(verbs::Library& lib, const IoThreadOptions& options) : lib_(lib), options_(options) {}
  void Loop();
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
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  ThreadCpuClock cpu_clock_;

  std::mutex tasks_mu_;
  std::vector<std::function<void()>> tasks_;
  std::atomic<bool> sleeping_{false};

  std::unordered_map<uint32_t, Engine*> engines_;
  std::vector<Engine*> dirty_;
  std::unordered_map<int, std::function<void()>> watched_;
};

}  // namespace bx::engine
