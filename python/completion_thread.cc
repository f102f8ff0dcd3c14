// CompletionThread (completion_thread.h).
#include "completion_thread.h"

#include <pybind11/pybind11.h>

#include <memory>
#include <utility>

namespace py = pybind11;

namespace bx::python {
namespace {

std::mutex instance_mu;
std::unique_ptr<CompletionThread> instance;
bool shut_down = false;

}  // namespace

CompletionThread::CompletionThread() : thread_([this] { Run(); }) {}

CompletionThread::~CompletionThread() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void CompletionThread::Enqueue(std::function<void()> work) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_one();
}

void CompletionThread::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to deliver
    std::deque<std::function<void()>> batch;
    batch.swap(queue_);
    lock.unlock();
    {
      // One GIL acquisition for a batch of completions; the GIL is never held while waiting.
      py::gil_scoped_acquire gil;
      for (auto& work : batch) work();
      batch.clear();  // Python objects captured by the work die under the GIL
    }
    lock.lock();
  }
}

void CompletionThread::Post(std::function<void()> work) {
  std::lock_guard lock(instance_mu);
  if (shut_down) {
    new std::function<void()>(std::move(work));  // deliberately leaked (see the header)
    return;
  }
  if (!instance) instance = std::make_unique<CompletionThread>();
  instance->Enqueue(std::move(work));
}

void CompletionThread::Shutdown() {
  std::unique_ptr<CompletionThread> stopping;
  {
    std::lock_guard lock(instance_mu);
    shut_down = true;
    stopping = std::move(instance);
  }
  py::gil_scoped_release release;  // the thread needs the GIL to drain its queue
  stopping.reset();
}

}  // namespace bx::python
