// IoThread: one epoll loop on its own thread, the unit of the tcp:// threading model (the RDMA
// transport's I/O threads play the same role with a CQ instead of epoll). Each registered fd has a
// Handler whose OnEvents runs on this thread; application threads hand work over with Post().
//
// Threads: Add, Modify, Post, RunAndWait and IsCurrent may be called from any thread. Remove and
// Handlers only from the I/O thread (inside OnEvents or a posted task).
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/loop_tasks.h"
#include "bx/status.h"

namespace bx::tcp {

class IoThread : public std::enable_shared_from_this<IoThread> {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // The epoll events (EPOLLIN, EPOLLOUT, EPOLLERR, ...) for this handler's fd.
    virtual void OnEvents(uint32_t events) = 0;
    // The transport is shutting down: release the fd and end with `reason`. Then Remove.
    virtual void Shutdown(const Status& reason) = 0;
  };

  // Creates the epoll set and starts the thread, named `name` (visible in top -H), pinned to
  // `cpu` unless it is -1.
  static Result<std::shared_ptr<IoThread>> Start(const std::string& name, int cpu = -1);
  // Stops and joins the thread (when Stop was not called), then closes the epoll set.
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  // Watches `fd` for `events` (level-triggered) and keeps `handler` alive until Remove.
  Status Add(int fd, uint32_t events, std::shared_ptr<Handler> handler);
  // Changes the events watched for `fd`.
  Status Modify(int fd, uint32_t events, Handler* handler);
  // Stops watching `fd` (before the caller closes it). The handler is released after the current
  // round of events, so a pointer to it in the same epoll batch stays valid.
  void Remove(int fd, Handler* handler);
  // Every registered handler.
  std::vector<std::shared_ptr<Handler>> Handlers();

  // Runs `task` on the I/O thread after the current round of events. After Stop, runs it at once
  // on the caller's thread, so work handed over is never lost (base/loop_tasks.h).
  void Post(std::function<void()> task) { tasks_.Post(std::move(task)); }
  // Runs `task` on the I/O thread and waits for it; runs it inline on the I/O thread itself.
  void RunAndWait(const std::function<void()>& task) { tasks_.RunAndWait(task); }
  bool IsCurrent() const { return tasks_.IsCurrent(); }
  // Whether the caller is the thread of any I/O thread, tcp or rdma (where blocking on another
  // one could deadlock).
  static bool OnAnyIoThread() { return LoopTasks::OnAnyLoop(); }

  // Asks every handler to Shutdown(reason), then ends the loop and joins the thread. Idempotent.
  // From the I/O thread itself (a handler destroying its transport) it does not wait: the loop
  // ends when the handler returns, and the thread keeps this object alive until then.
  void Stop(const Status& reason);

 private:
  IoThread(int epoll_fd, int wakeup_fd)
      : epoll_fd_(epoll_fd), wakeup_fd_(wakeup_fd), tasks_([this] { Wake(); }) {}
  void Loop();
  bool RunTasks();  // true when tasks remain (posted by the tasks themselves)
  void Wake();

  const int epoll_fd_;
  const int wakeup_fd_;  // an eventfd: Post wakes epoll_wait through it
  std::thread thread_;
  std::atomic<bool> stop_requested_{false};
  std::shared_ptr<IoThread> keep_alive_;  // I/O thread: set when it was stopped from inside
  LoopTasks tasks_;

  std::mutex mutex_;      // guards everything below
  bool stopped_ = false;  // the loop has exited: Add refuses
  std::unordered_map<Handler*, std::shared_ptr<Handler>> handlers_;
  std::vector<std::shared_ptr<Handler>> removed_;  // released after the current round
};

}  // namespace bx::tcp
