#include "base/loop_tasks.h"

#include <future>

namespace bx {
namespace {

thread_local const LoopTasks* g_current_loop = nullptr;

}  // namespace

void LoopTasks::Post(std::function<void()> task) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (!finished_) {
      // One wake-up per batch: a non-empty queue means one is on its way already, or the loop
      // is about to look at the queue anyway.
      wake = tasks_.empty() && !IsCurrent();
      tasks_.push_back(std::move(task));
      task = nullptr;
    }
  }
  if (task) {
    std::lock_guard lock(inline_mu_);
    task();
  } else if (wake) {
    wake_();
  }
}

void LoopTasks::RunAndWait(const std::function<void()>& task) {
  if (IsCurrent()) {
    task();
    return;
  }
  std::promise<void> done;
  Post([&] {
    task();
    done.set_value();
  });
  done.get_future().wait();
}

bool LoopTasks::IsCurrent() const {
  return g_current_loop == this;
}

bool LoopTasks::OnAnyLoop() {
  return g_current_loop != nullptr;
}

const LoopTasks* LoopTasks::Current() {
  return g_current_loop;
}

bool LoopTasks::OnLoopOrEnded() const {
  if (IsCurrent()) return true;
  std::lock_guard lock(mu_);
  return finished_;
}

bool LoopTasks::HasPending() const {
  std::lock_guard lock(mu_);
  return !tasks_.empty();
}

void LoopTasks::EnterLoop() {
  g_current_loop = this;
}

bool LoopTasks::RunPending() {
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(mu_);
    tasks.swap(tasks_);
  }
  for (std::function<void()>& task : tasks) task();
  std::lock_guard lock(mu_);
  return !tasks_.empty();
}

void LoopTasks::Finish() {
  // Tasks may post more while they run: drain until the queue stays empty, then close it under
  // the same lock so that nothing slips in between.
  for (;;) {
    std::vector<std::function<void()>> tasks;
    {
      std::lock_guard lock(mu_);
      if (tasks_.empty()) {
        finished_ = true;
        break;
      }
      tasks.swap(tasks_);
    }
    for (std::function<void()>& task : tasks) task();
  }
  g_current_loop = nullptr;
}

}  // namespace bx
