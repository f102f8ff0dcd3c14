// LoopTasks' rules, on a loop thread driven by the test: order, no task lost after the loop ends,
// RunAndWait from the loop itself.
#include "base/loop_tasks.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <thread>
#include <vector>

namespace bx {
namespace {

// A minimal loop: runs posted tasks until told to stop, sleeping on a condition variable.
class TestLoop {
 public:
  TestLoop() : tasks_([this] { Wake(); }) {
    thread_ = std::thread([this] {
      tasks_.EnterLoop();
      while (!stop_) {
        if (tasks_.RunPending()) continue;
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return woken_ || stop_; });
        woken_ = false;
      }
      tasks_.Finish();
    });
  }
  ~TestLoop() { Stop(); }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  LoopTasks& tasks() { return tasks_; }
  std::thread::id id() const { return thread_.get_id(); }

 private:
  void Wake() {
    {
      std::lock_guard lock(mu_);
      woken_ = true;
    }
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
  std::atomic<bool> stop_{false};
  LoopTasks tasks_;
  std::thread thread_;
};

TEST(LoopTasksTest, TasksRunOnTheLoopInTheOrderPosted) {
  TestLoop loop;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 100; ++i) {
    loop.tasks().Post([&, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  loop.tasks().RunAndWait([] {});
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_EQ(threads[i], loop.id());
  }
}

TEST(LoopTasksTest, RunAndWaitFromTheLoopItselfRunsInline) {
  TestLoop loop;
  bool inner_ran = false;
  bool was_current = false;
  loop.tasks().RunAndWait([&] {
    was_current = loop.tasks().IsCurrent() && LoopTasks::OnAnyLoop();
    loop.tasks().RunAndWait([&] { inner_ran = true; });  // would wait for itself
  });
  EXPECT_TRUE(inner_ran);
  EXPECT_TRUE(was_current);
  EXPECT_FALSE(loop.tasks().IsCurrent());
  EXPECT_FALSE(LoopTasks::OnAnyLoop());
}

TEST(LoopTasksTest, TasksPostedAsOrAfterTheLoopEndsStillRun) {
  TestLoop loop;
  std::atomic<int> ran{0};
  // Posted by a task, queued while the loop is told to stop: Finish runs it.
  loop.tasks().Post([&] { loop.tasks().Post([&] { ++ran; }); });
  loop.Stop();
  EXPECT_EQ(ran.load(), 1);
  // After the loop: on the caller, at once; RunAndWait does not wait for a loop that is gone.
  std::thread::id where;
  loop.tasks().Post([&] {
    ++ran;
    where = std::this_thread::get_id();
  });
  EXPECT_EQ(where, std::this_thread::get_id());
  loop.tasks().RunAndWait([&] { ++ran; });
  EXPECT_EQ(ran.load(), 3);
  EXPECT_FALSE(loop.tasks().HasPending());
}

TEST(LoopTasksTest, ManyPostersRacingTheEndLoseNothing) {
  constexpr int kPosters = 4;
  constexpr int kEach = 20000;
  std::atomic<int> ran{0};
  TestLoop loop;
  std::vector<std::thread> posters;
  for (int p = 0; p < kPosters; ++p) {
    posters.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) loop.tasks().Post([&] { ++ran; });
    });
  }
  loop.Stop();  // somewhere in the middle of the posting
  for (std::thread& t : posters) t.join();
  EXPECT_EQ(ran.load(), kPosters * kEach);
}

}  // namespace
}  // namespace bx
