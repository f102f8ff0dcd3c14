#include "base/io_thread.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/cpu_list.h"
#include "base/dcheck.h"
#include "bx/log.h"

namespace bx {
namespace {

PollPolicyOptions PolicyOptions(const IoThreadOptions& options) {
  PollPolicyOptions p;
  p.adaptive = options.adaptive_polling;
  p.max_spin_ns = uint64_t(std::max(options.busy_poll_us, 0)) * 1000;
  p.spin_limit_ns = uint64_t(std::max(options.spin_limit_us, 0)) * 1000;
  p.detect_contention = options.detect_contention;
  return p;
}

// Watch's handler: a function for a readable fd, which its owner unwatches itself.
class ReadableHandler final : public IoThread::Handler {
 public:
  explicit ReadableHandler(std::function<void()> on_readable)
      : on_readable_(std::move(on_readable)) {}
  void OnEvents(uint32_t) override { on_readable_(); }
  void Shutdown(const Status&) override {}

 private:
  const std::function<void()> on_readable_;
};

Status AddTag(int epoll_fd, int fd, void* tag) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.ptr = tag;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) != 0) {
    return Status::FromErrno(errno, "epoll_ctl(ADD)");
  }
  return Status::Ok();
}

}  // namespace

char IoThread::wake_tag_;
char IoThread::poller_tag_;

IoThread::IoThread(const IoThreadOptions& options, std::unique_ptr<Poller> poller)
    : options_(options),
      poller_(std::move(poller)),
      tasks_([this] { Wake(); }),
      policy_(PolicyOptions(options)) {}

Result<std::shared_ptr<IoThread>> IoThread::Start(const IoThreadOptions& options,
                                                  std::unique_ptr<Poller> poller) {
  std::shared_ptr<IoThread> thread(new IoThread(options, std::move(poller)));
  thread->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (thread->epoll_fd_ < 0) return Status::FromErrno(errno, "epoll_create1");
  thread->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (thread->wake_fd_ < 0) return Status::FromErrno(errno, "eventfd");
  BX_RETURN_IF_ERROR(AddTag(thread->epoll_fd_, thread->wake_fd_, &wake_tag_));
  if (thread->poller_) {
    BX_RETURN_IF_ERROR(AddTag(thread->epoll_fd_, thread->poller_->ReadyFd(), &poller_tag_));
  }
  IoThread* self = thread.get();
  thread->thread_ = std::thread([self] {
    self->Run();
    // Stopped from inside: this may be the last reference, and the object ends on its thread.
    std::shared_ptr<IoThread> last = std::move(self->keep_alive_);
  });
  pthread_setname_np(thread->thread_.native_handle(), options.name.substr(0, 15).c_str());
  // A pin that cannot be kept fails the thread.
  if (options.cpu >= 0) BX_RETURN_IF_ERROR(PinThread(thread->thread_.native_handle(), options.cpu));
  return thread;
}

IoThread::~IoThread() {
  if (thread_.joinable() && thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the loop has ended (Stop from inside); a thread cannot join itself
  } else if (thread_.joinable()) {
    Stop();
  }
  // After the loop, before the fds: what the poller owns may need its events taken first.
  poller_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

Status IoThread::Add(int fd, uint32_t events, std::shared_ptr<Handler> handler) {
  epoll_event event{};
  event.events = events;
  event.data.ptr = handler.get();
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_) return Aborted("I/O thread " + options_.name + " has stopped");
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
    return Status::FromErrno(errno, "epoll_ctl(ADD)");
  }
  Handler* key = handler.get();
  handlers_.emplace(key, std::move(handler));
  return Status::Ok();
}

Status IoThread::Modify(int fd, uint32_t events, Handler* handler) {
  epoll_event event{};
  event.events = events;
  event.data.ptr = handler;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event) != 0) {
    return Status::FromErrno(errno, "epoll_ctl(MOD)");
  }
  return Status::Ok();
}

void IoThread::Remove(int fd, Handler* handler) {
  BX_DCHECK(OnLoopOrEnded());
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = handlers_.find(handler);
  if (it == handlers_.end()) return;
  handler->removed_ = true;
  removed_.push_back(std::move(it->second));
  handlers_.erase(it);
}

Status IoThread::Watch(int fd, std::function<void()> on_readable) {
  BX_DCHECK(OnLoopOrEnded());
  auto handler = std::make_shared<ReadableHandler>(std::move(on_readable));
  Handler* raw = handler.get();
  BX_RETURN_IF_ERROR(Add(fd, EPOLLIN | EPOLLRDHUP, std::move(handler)));
  std::lock_guard<std::mutex> lock(mutex_);
  watches_[fd] = raw;
  return Status::Ok();
}

void IoThread::Unwatch(int fd) {
  BX_DCHECK(OnLoopOrEnded());
  Handler* handler = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = watches_.find(fd);
    if (it == watches_.end()) return;
    handler = it->second;
    watches_.erase(it);
  }
  Remove(fd, handler);
}

void IoThread::Stop(const Status& reason) {
  if (!stopping_.exchange(true)) {
    RunAndWait([&] {
      std::vector<std::shared_ptr<Handler>> all;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& [key, handler] : handlers_) all.push_back(handler);
      }
      for (const std::shared_ptr<Handler>& handler : all) handler->Shutdown(reason);
    });
    stop_.store(true, std::memory_order_release);
    WakeNow();
  }
  if (IsCurrent()) {
    if (!keep_alive_) keep_alive_ = shared_from_this();
    return;
  }
  // Also after a Stop from inside: the thread has ended or is ending, and must be joined.
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void IoThread::Wake() {
  // A polling thread sees the task on its next pass: only a sleeping one needs the system call.
  if (poller_ == nullptr || sleeping_.load(std::memory_order_seq_cst)) WakeNow();
}

void IoThread::WakeNow() {
  uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: a wake-up is pending, which is all we need.
  while (write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void IoThread::Run() {
  cpu_clock_.CaptureCurrentThread();
  tasks_.EnterLoop();
  if (poller_) {
    PollingLoop();
  } else {
    BlockingLoop();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }
  // Tasks posted from now on run on their caller's thread; run what is already queued here.
  tasks_.Finish();
  ReleaseRemoved();
}

void IoThread::RunHandlers(const epoll_event* events, int n) {
  // The poller first: data the peer's NIC delivered before its process closed the bootstrap
  // connection is already in our CQ, and must reach the application before the close does.
  if (poller_) poller_->Poll();
  for (int i = 0; i < n; ++i) {
    void* ptr = events[i].data.ptr;
    if (ptr == &poller_tag_) continue;  // taken when the thread next sleeps (level-triggered)
    if (ptr == &wake_tag_) {
      uint64_t value;
      while (read(wake_fd_, &value, sizeof(value)) < 0 && errno == EINTR) {
      }
      continue;
    }
    auto* handler = static_cast<Handler*>(ptr);
    // A handler removed earlier in the round (by itself or another) may be gone with its fd.
    if (!handler->removed_) handler->OnEvents(events[i].events);
  }
}

bool IoThread::RunTasks() {
  bool more = tasks_.RunPending();
  ReleaseRemoved();
  return more;
}

void IoThread::ReleaseRemoved() {
  // Released outside the lock: a handler's destructor may close its fd or free buffers.
  std::vector<std::shared_ptr<Handler>> released;
  std::lock_guard<std::mutex> lock(mutex_);
  released.swap(removed_);
}

void IoThread::BlockingLoop() {
  epoll_event events[kEventsPerWait];
  bool tasks_pending = false;
  while (!stop_.load(std::memory_order_relaxed)) {
    int count = epoll_wait(epoll_fd_, events, kEventsPerWait, tasks_pending ? 0 : -1);
    if (count < 0) {
      if (errno == EINTR) continue;
      bx::Log(LogLevel::kError, Status::FromErrno(errno, "bx io thread: epoll_wait").ToString());
      break;
    }
    RunHandlers(events, count);
    tasks_pending = RunTasks();
  }
}

}  // namespace bx
