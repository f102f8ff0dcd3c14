// LoopTasks: the work other threads hand to one event-loop thread, and the rules every I/O thread
// of the library keeps (base/io_thread.h: one per I/O thread, whether it polls or blocks in epoll):
//   - Post, from any thread, runs the task on the loop thread, in the order posted. Once the loop
//     has finished, it runs the task at once on the caller's thread (one at a time): work handed
//     over is never lost, and a task that only finds its object ended can still say so.
//   - RunAndWait runs the task and returns when it has run; on the loop thread itself it runs
//     inline instead of waiting for itself.
//   - IsCurrent says whether the caller is this loop's thread; OnAnyLoop whether it is any loop's
//     (a thread that must not block on another loop, which may be waiting for it).
//
// Threads: Post, RunAndWait, IsCurrent, OnLoopOrEnded and HasPending from any thread; EnterLoop,
// RunPending and Finish on the loop thread.
#pragma once

#include <functional>
#include <mutex>
#include <vector>

namespace bx {

class LoopTasks {
 public:
  // `wake` is called (outside the lock) when a task is posted into an empty queue from another
  // thread: the loop may be asleep and must look at the queue.
  explicit LoopTasks(std::function<void()> wake) : wake_(std::move(wake)) {}
  LoopTasks(const LoopTasks&) = delete;
  LoopTasks& operator=(const LoopTasks&) = delete;

  void Post(std::function<void()> task);
  void RunAndWait(const std::function<void()>& task);
  bool IsCurrent() const;
  static bool OnAnyLoop();
  // The loop whose thread the caller is (null off every loop).
  static const LoopTasks* Current();
  // Whether the caller may do this loop's work: it is the loop's thread, or the loop has ended
  // (posted work then runs on the posters' threads, one at a time). What the BX_DCHECKs of
  // methods documented "I/O thread only" ask (base/dcheck.h).
  bool OnLoopOrEnded() const;
  bool HasPending() const;

  // Loop thread: the calling thread is this loop's from now on.
  void EnterLoop();
  // Loop thread: runs the tasks queued so far; true when tasks they posted are waiting.
  bool RunPending();
  // Loop thread, as the loop ends: runs what is queued; later Posts run on their callers.
  void Finish();

 private:
  const std::function<void()> wake_;
  mutable std::mutex mu_;
  std::vector<std::function<void()>> tasks_;
  bool finished_ = false;
  std::mutex inline_mu_;  // after Finish: tasks run one at a time, as on the loop
};

}  // namespace bx
