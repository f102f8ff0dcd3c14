// CompletionThread: where the Python module's asynchronous calls finish. A bexpress callback runs
// on a transport I/O thread that must never wait for the GIL (a Python thread may hold it for a
// whole switch interval), so the callback only queues the finished result here; this thread
// takes the GIL and resolves the caller's concurrent.futures.Future.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace bx::python {

class CompletionThread {
 public:
  CompletionThread();
  ~CompletionThread();  // runs what is queued, then joins; call without the GIL

  // Queues `work` on the process's one thread (started on first use), where it runs holding the
  // GIL. Never blocks on the GIL. After Shutdown the work is leaked, not run or destroyed: the
  // interpreter is finalising, and the Python objects it holds may no longer be touched.
  static void Post(std::function<void()> work);
  // Delivers what is queued and stops the thread (at interpreter exit; called with the GIL).
  static void Shutdown();

 private:
  void Enqueue(std::function<void()> work);
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace bx::python
