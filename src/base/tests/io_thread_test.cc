// IoThread without verbs: fd handlers and Stop on a blocking thread, the keep-alive of a thread
// stopped from inside, and a polling thread that takes a poller's work and sleeps between.
#include "base/io_thread.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace bx {
namespace {

using namespace std::chrono_literals;

// Waits until `done()` holds, yielding between looks; false after `timeout`.
template <typename F>
bool Eventually(F done, std::chrono::seconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Reads what arrives on a pipe; Shutdown records the reason and removes itself.
class PipeReader final : public IoThread::Handler {
 public:
  PipeReader(IoThread& io, int fd) : io_(io), fd_(fd) {}
  void OnEvents(uint32_t) override {
    char c;
    while (read(fd_, &c, 1) == 1) {
      std::lock_guard lock(mu_);
      ++bytes_;
      on_thread_ = io_.IsCurrent();
      cv_.notify_all();
    }
  }
  void Shutdown(const Status& reason) override {
    reason_ = reason;
    io_.Remove(fd_, this);
  }
  bool WaitBytes(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return bytes_ >= n; }) && on_thread_;
  }
  Status reason_;

 private:
  IoThread& io_;
  const int fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  int bytes_ = 0;
  bool on_thread_ = false;
};

TEST(IoThreadTest, HandlersSeeTheirEventsOnTheThreadAndStopShutsThemDown) {
  IoThreadOptions options;
  options.name = "bx-test-io";
  auto io = IoThread::Start(options);
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  auto reader = std::make_shared<PipeReader>(**io, fds[0]);
  ASSERT_TRUE((*io)->Add(fds[0], EPOLLIN, reader).ok());
  ASSERT_EQ(write(fds[1], "ab", 2), 2);
  EXPECT_TRUE(reader->WaitBytes(2));

  (*io)->Stop(Aborted("test over"));
  EXPECT_EQ(reader->reason_.code(), StatusCode::kAborted);
  EXPECT_EQ(reader->reason_.message(), "test over");
  // Stopped: a task runs on its poster at once, and nothing more can be watched.
  bool on_thread = true;
  (*io)->Post([&] { on_thread = (*io)->IsCurrent(); });
  EXPECT_FALSE(on_thread);
  EXPECT_FALSE((*io)->Add(fds[1], EPOLLOUT, reader).ok());
  close(fds[0]);
  close(fds[1]);
}

TEST(IoThreadTest, AThreadStoppedFromInsideOutlivesItsLastReferenceUntilItsLoopEnds) {
  auto io = IoThread::Start(IoThreadOptions{});
  ASSERT_TRUE(io.ok());
  std::weak_ptr<IoThread> weak = *io;
  std::shared_ptr<IoThread> last = std::move(io).value();
  IoThread* raw = last.get();
  // The task holds the only reference: as a callback that destroys its transport would.
  raw->Post([last = std::move(last)]() mutable {
    last->Stop();
    last.reset();
  });
  EXPECT_TRUE(Eventually([&] { return weak.expired(); }));
}

// Work that a "device" thread hands over by a counter and an eventfd, as a NIC does by a CQ and
// its completion channel.
class CountingPoller final : public Poller {
 public:
  CountingPoller() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~CountingPoller() override { close(fd_); }
  // Any thread.
  void Produce() {
    pending_.fetch_add(1);
    uint64_t one = 1;
    (void)!write(fd_, &one, sizeof(one));
  }
  bool WaitTaken(uint64_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return taken_ >= n; });
  }

  bool Poll() override {
    const uint64_t n = pending_.exchange(0);
    if (n == 0) return false;
    std::lock_guard lock(mu_);
    taken_ += n;
    cv_.notify_all();
    return true;
  }
  bool Flush() override { return false; }
  bool ExpectsWork() const override { return false; }
  void Arm() override {}
  int ReadyFd() const override { return fd_; }
  void OnReady() override {
    uint64_t value;
    (void)!read(fd_, &value, sizeof(value));
  }

 private:
  const int fd_;
  std::atomic<uint64_t> pending_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t taken_ = 0;
};

TEST(IoThreadTest, APollingThreadTakesItsPollersWorkAndSleepsBetween) {
  auto poller = std::make_unique<CountingPoller>();
  CountingPoller& work = *poller;
  auto io = IoThread::Start(IoThreadOptions{}, std::move(poller));
  ASSERT_TRUE(io.ok());
  ASSERT_EQ((*io)->poller(), &work);
  for (uint64_t round = 1; round <= 20; ++round) {
    for (int i = 0; i < 5; ++i) work.Produce();
    ASSERT_TRUE(work.WaitTaken(round * 5)) << "round " << round;
    // Between rounds the thread goes to sleep (the policy polls for 200 us at most): the next
    // round's fd wakes it.
    ASSERT_TRUE(Eventually([&] { return (*io)->counters().sleeps >= round; })) << round;
  }
  const IoThreadCounters c = (*io)->counters();
  EXPECT_GE(c.busy_polls, 20u);  // a pass with work in every round at least
  // Tasks still run, in order, on the thread.
  std::vector<int> order;
  for (int i = 0; i < 3; ++i) (*io)->Post([&, i] { order.push_back(i); });
  (*io)->RunAndWait([&] { EXPECT_TRUE((*io)->IsCurrent()); });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  (*io)->Stop();
}

}  // namespace
}  // namespace bx
