#include "transport/tcp/io_thread.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <future>

#include "base/cpu_list.h"
#include "bx/log.h"

namespace bx::tcp {
namespace {

// epoll_event.data.ptr of the wakeup eventfd; handlers are never at this address.
char g_wakeup_tag;

// Events taken per epoll_wait: enough that 64 busy sockets cost one system call per round.
constexpr int kEventsPerWait = 128;

}  // namespace

Result<std::shared_ptr<IoThread>> IoThread::Start(const std::string& name, int cpu) {
  int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return Status::FromErrno(errno, "epoll_create1");
  int wakeup_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeup_fd < 0) {
    Status status = Status::FromErrno(errno, "eventfd");
    close(epoll_fd);
    return status;
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.ptr = &g_wakeup_tag;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wakeup_fd, &event) != 0) {
    Status status = Status::FromErrno(errno, "epoll_ctl(ADD eventfd)");
    close(wakeup_fd);
    close(epoll_fd);
    return status;
  }
  std::shared_ptr<IoThread> thread(new IoThread(epoll_fd, wakeup_fd));
  IoThread* self = thread.get();
  thread->thread_ = std::thread([self] {
    self->Loop();
    // Stopped from inside: this may be the last reference, and the object ends on its thread.
    std::shared_ptr<IoThread> last = std::move(self->keep_alive_);
  });
  pthread_setname_np(thread->thread_.native_handle(), name.substr(0, 15).c_str());
  if (cpu >= 0) BX_RETURN_IF_ERROR(PinThread(thread->thread_.native_handle(), cpu));
  return thread;
}

IoThread::~IoThread() {
  if (thread_.joinable() && thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the loop has ended (Stop from inside); a thread cannot join itself
  } else {
    Stop(Aborted("tcp transport shut down"));
  }
  close(wakeup_fd_);
  close(epoll_fd_);
}

Status IoThread::Add(int fd, uint32_t events, std::shared_ptr<Handler> handler) {
  epoll_event event{};
  event.events = events;
  event.data.ptr = handler.get();
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_) return Aborted("tcp transport shut down");
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
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = handlers_.find(handler);
  if (it == handlers_.end()) return;
  removed_.push_back(std::move(it->second));
  handlers_.erase(it);
}

std::vector<std::shared_ptr<IoThread::Handler>> IoThread::Handlers() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<Handler>> all;
  for (auto& [key, handler] : handlers_) all.push_back(handler);
  return all;
}

void IoThread::Stop(const Status& reason) {
  if (!thread_.joinable()) return;
  RunAndWait([&] {
    for (const std::shared_ptr<Handler>& handler : Handlers()) handler->Shutdown(reason);
  });
  stop_requested_ = true;
  Wake();
  if (IsCurrent()) {
    keep_alive_ = shared_from_this();
    return;
  }
  thread_.join();
}

void IoThread::Wake() {
  uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: a wakeup is pending, which is all we need.
  while (write(wakeup_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

bool IoThread::RunTasks() {
  bool more = tasks_.RunPending();
  // Released outside the lock: a handler's destructor may close its fd or free buffers.
  std::vector<std::shared_ptr<Handler>> released;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released.swap(removed_);
  }
  return more;
}

void IoThread::Loop() {
  tasks_.EnterLoop();
  epoll_event events[kEventsPerWait];
  bool tasks_pending = false;
  while (!stop_requested_.load(std::memory_order_relaxed)) {
    int count = epoll_wait(epoll_fd_, events, kEventsPerWait, tasks_pending ? 0 : -1);
    if (count < 0) {
      if (errno == EINTR) continue;
      bx::Log(LogLevel::kError,
              Status::FromErrno(errno, "bx tcp io thread: epoll_wait").ToString());
      break;
    }
    for (int i = 0; i < count; ++i) {
      if (events[i].data.ptr == &g_wakeup_tag) {
        uint64_t value;
        while (read(wakeup_fd_, &value, sizeof(value)) < 0 && errno == EINTR) {
        }
        continue;
      }
      static_cast<Handler*>(events[i].data.ptr)->OnEvents(events[i].events);
    }
    tasks_pending = RunTasks();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
  }
  // Tasks posted from now on run on their caller's thread; run what is already queued here.
  tasks_.Finish();
  std::vector<std::shared_ptr<Handler>> released;
  std::lock_guard<std::mutex> lock(mutex_);
  released.swap(removed_);
}

}  // namespace bx::tcp
