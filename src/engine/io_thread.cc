#include "engine/io_thread.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "base/cpu_list.h"

namespace bx::engine {
namespace {

constexpr int kPollBatch = 64;
// Watched descriptors are checked every this many idle polls while busy polling (a syscall).
constexpr int kWatchCheckInterval = 1024;
// The thread's schedstat is read once per this much time awake (a pread of a procfs file).
constexpr uint64_t kSchedStatWindowNs = 2'000'000;

uint64_t NowNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

Result<std::shared_ptr<IoThread>> IoThread::Create(verbs::Library& lib, ibv_context* context,
                                                   ibv_pd* pd, const IoThreadOptions& options) {
  std::shared_ptr<IoThread> t(new IoThread(lib, options));
  t->device_pd_ = pd;
  t->channel_ = lib.create_comp_channel(context);
  if (t->channel_ == nullptr) return Status::FromErrno(errno, "ibv_create_comp_channel");
  t->cq_ = lib.create_cq(context, options.cq_entries, t.get(), t->channel_, 0);
  if (t->cq_ == nullptr) return Status::FromErrno(errno, "ibv_create_cq");
  // A thread domain tells the provider that one thread drives these QPs, so it may skip locks.
  ibv_td_init_attr td_attr{};
  t->td_ = verbs::Library::AllocTd(context, &td_attr);  // optional: null where unsupported
  // QPs of this thread live in a parent domain carrying its thread domain, so on hardware no two
  // threads share the provider's locks or doorbell pages (optional too).
  if (t->td_ != nullptr && pd != nullptr) {
    ibv_parent_domain_init_attr attr{};
    attr.pd = pd;
    attr.td = t->td_;
    t->domain_ = verbs::Library::AllocParentDomain(context, &attr);
  }
  t->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  t->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (t->epoll_fd_ < 0 || t->wake_fd_ < 0) return Status::FromErrno(errno, "epoll/eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = t->wake_fd_;
  epoll_ctl(t->epoll_fd_, EPOLL_CTL_ADD, t->wake_fd_, &ev);
  ev.data.fd = t->channel_->fd;
  epoll_ctl(t->epoll_fd_, EPOLL_CTL_ADD, t->channel_->fd, &ev);
  IoThread* raw = t.get();
  t->thread_ = std::thread([raw] {
    raw->Loop();
    // Stopped from inside: this may be the last reference, and the object ends on its thread.
    std::shared_ptr<IoThread> last = std::move(raw->keep_alive_);
  });
  // Pinned as tcp::IoThread pins its threads: a pin that cannot be kept fails the thread.
  if (options.cpu >= 0) BX_RETURN_IF_ERROR(PinThread(t->thread_.native_handle(), options.cpu));
  return t;
}

IoThread::~IoThread() {
  if (thread_.joinable() && thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the loop has ended (Stop from inside); a thread cannot join itself
  } else {
    Stop();
  }
  // Every QP in the domain and on the CQ is gone: their owners hold this thread.
  if (domain_) lib_.dealloc_pd(domain_);
  if (cq_) {
    // ibv_destroy_cq waits until every event delivered on the channel is acknowledged: take and
    // ack any the thread did not get to before it stopped.
    int flags = fcntl(channel_->fd, F_GETFL);
    fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK);
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    while (lib_.get_cq_event(channel_, &cq, &ctx) == 0) lib_.ack_cq_events(cq, 1);
    lib_.destroy_cq(cq_);
  }
  if (td_) verbs::Library::DeallocTd(td_);
  if (channel_) lib_.destroy_comp_channel(channel_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void IoThread::Stop() {
  if (!stop_.exchange(true)) {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
  }
  if (IsCurrent()) {
    if (!keep_alive_) keep_alive_ = shared_from_this();
    return;
  }
  // Also after a Stop from inside: the thread has ended or is ending, and must be joined.
  if (thread_.joinable()) thread_.join();
}

IoThreadCounters& IoThreadCounters::operator+=(const IoThreadCounters& o) {
  busy_polls += o.busy_polls;
  empty_polls += o.empty_polls;
  yields += o.yields;
  sleeps += o.sleeps;
  cq_wakeups += o.cq_wakeups;
  task_wakeups += o.task_wakeups;
  gaps_polled += o.gaps_polled;
  gaps_outlasted += o.gaps_outlasted;
  gaps_slept += o.gaps_slept;
  slow_passes += o.slow_passes;
  oversubscribed_windows += o.oversubscribed_windows;
  contended_stretches += o.contended_stretches;
  cpu_wait_ns += o.cpu_wait_ns;
  return *this;
}

std::map<std::string, uint64_t> IoThreadCounters::ToMap() const {
  return {{"io_busy_polls", busy_polls},
          {"io_empty_polls", empty_polls},
          {"io_yields", yields},
          {"io_sleeps", sleeps},
          {"io_cq_wakeups", cq_wakeups},
          {"io_task_wakeups", task_wakeups},
          {"io_gaps_polled", gaps_polled},
          {"io_gaps_outlasted", gaps_outlasted},
          {"io_gaps_slept", gaps_slept},
          {"io_slow_passes", slow_passes},
          {"io_oversubscribed_windows", oversubscribed_windows},
          {"io_contended_stretches", contended_stretches},
          {"io_cpu_wait_ns", cpu_wait_ns}};
}

IoThreadCounters IoThread::counters() const {
  IoThreadCounters c;
  c.busy_polls = busy_polls_.Get();
  c.empty_polls = empty_polls_.Get();
  c.yields = yields_.Get();
  c.sleeps = sleeps_.Get();
  c.cq_wakeups = cq_wakeups_.Get();
  c.task_wakeups = task_wakeups_.Get();
  c.gaps_polled = policy_.polled_gaps();
  c.gaps_outlasted = policy_.outlasted_gaps();
  c.gaps_slept = policy_.slept_gaps();
  c.slow_passes = policy_.slow_passes();
  c.oversubscribed_windows = policy_.oversubscribed_windows();
  c.contended_stretches = policy_.contended_stretches();
  c.cpu_wait_ns = sched_stat_.Read().waited_ns;
  return c;
}

PollPolicyOptions IoThread::PolicyOptions(const IoThreadOptions& options) {
  PollPolicyOptions p;
  p.adaptive = options.adaptive_polling;
  p.max_spin_ns = uint64_t(std::max(options.busy_poll_us, 0)) * 1000;
  p.spin_limit_ns = uint64_t(std::max(options.spin_limit_us, 0)) * 1000;
  p.detect_contention = options.detect_contention;
  return p;
}

void IoThread::Wake() {
  // Only a sleeping thread needs the syscall; a polling one sees the task on its next pass.
  if (sleeping_.load(std::memory_order_seq_cst)) {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
  }
}

void IoThread::AddEngine(Engine* engine) {
  engines_[engine->qp_num()] = engine;
}

void IoThread::Recount(Engine* engine) {
  const bool expecting = engine->ExpectsCompletion();
  if (expecting == engine->counted_expecting) return;
  engine->counted_expecting = expecting;
  expecting_ += expecting ? 1 : -1;
}

void IoThread::RemoveEngine(Engine* engine) {
  if (engine->counted_expecting) {
    engine->counted_expecting = false;
    --expecting_;
  }
  engines_.erase(engine->qp_num());
  std::erase(dirty_, engine);
}

void IoThread::MarkDirty(Engine* engine) {
  engine->dirty = true;
  if (std::find(dirty_.begin(), dirty_.end(), engine) == dirty_.end()) dirty_.push_back(engine);
}

void IoThread::Watch(int fd, std::function<void()> on_readable) {
  watched_[fd] = std::move(on_readable);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void IoThread::Unwatch(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  watched_.erase(fd);
}

bool IoThread::RunTasks() {
  if (!tasks_.HasPending()) return false;
  tasks_.RunPending();
  return true;
}

int IoThread::DrainCompletions() {
  ibv_wc wc[kPollBatch];
  int total = 0;
  for (;;) {
    int n = verbs::Library::PollCq(cq_, kPollBatch, wc);
    for (int i = 0; i < n; ++i) {
      auto it = engines_.find(wc[i].qp_num);
      if (it == engines_.end()) continue;  // a completion of an engine already removed
      Engine* engine = it->second;
      engine->OnCompletion(wc[i]);
      if (engine->dirty) MarkDirty(engine);
      Recount(engine);
    }
    total += n > 0 ? n : 0;
    if (n < kPollBatch) return total;
  }
}

void IoThread::RunWatched(const epoll_event* events, int n) {
  // Completions first: data the peer's NIC delivered before its process closed the bootstrap
  // connection is already in our CQ, and must reach the application before the close does.
  DrainCompletions();
  for (int i = 0; i < n; ++i) {
    auto it = watched_.find(events[i].data.fd);
    if (it == watched_.end()) continue;
    auto cb = it->second;  // the callback may unwatch itself
    cb();
  }
}

bool IoThread::PollOnce() {
  bool worked = DrainCompletions() > 0;
  worked |= RunTasks();
  // Pump after the whole batch, so the work it freed goes out in one doorbell per engine.
  while (!dirty_.empty()) {
    std::vector<Engine*> dirty;
    dirty.swap(dirty_);
    for (Engine* e : dirty) {
      e->Pump();
      Recount(e);
    }
    worked = true;
  }
  return worked;
}

void IoThread::Sleep() {
  sleeping_.store(true, std::memory_order_seq_cst);
  verbs::Library::ReqNotifyCq(cq_, 0);
  // Anything that arrived before the CQ was armed raises no event: look once more.
  if (tasks_.HasPending()) {
    sleeping_.store(false);
    return;
  }
  epoll_event events[16];
  int n = 0;
  bool cq_ready = false;
  // A completion that slipped in between the last poll and the arm raises no event: take it now.
  if (DrainCompletions() > 0) {
    sleeping_.store(false);
    policy_.OnWork(NowNs());
    return;
  }
  if (stop_.load()) {
    sleeping_.store(false);
    return;
  }
  sleeps_.Add();
  n = epoll_wait(epoll_fd_, events, 16, -1);
  sleeping_.store(false, std::memory_order_seq_cst);
  epoll_event watched[16];
  int watched_count = 0;
  for (int i = 0; i < n; ++i) {
    int fd = events[i].data.fd;
    if (fd == wake_fd_) {
      uint64_t v;
      ssize_t r = read(wake_fd_, &v, sizeof(v));
      (void)r;
      task_wakeups_.Add();
    } else if (fd == channel_->fd) {
      cq_ready = true;
      cq_wakeups_.Add();
    } else {
      watched[watched_count++] = events[i];
    }
  }
  if (cq_ready) {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (lib_.get_cq_event(channel_, &cq, &ctx) == 0) lib_.ack_cq_events(cq, 1);
  }
  if (watched_count > 0) RunWatched(watched, watched_count);
}

// Every kSchedStatWindowNs, what the thread waited for a CPU goes to the policy, read after the
// pass's work (never between a completion and its delivery). A window may span sleeps: a woken
// thread that waits long for a CPU shares it with busy threads as much as a polling one does.
void IoThread::WatchSchedStat(uint64_t now_ns) {
  if (now_ns - stat_window_start_ns_ < kSchedStatWindowNs) return;
  const ThreadSchedStat::Sample now = sched_stat_.Read();
  policy_.OnSchedStat(now_ns, now.waited_ns - stat_window_start_.waited_ns,
                      now.turns - stat_window_start_.turns);
  stat_window_start_ns_ = now_ns;
  stat_window_start_ = now;
}

void IoThread::Loop() {
  pthread_setname_np(pthread_self(), options_.name.substr(0, 15).c_str());
  cpu_clock_.CaptureCurrentThread();
  sched_stat_.CaptureCurrentThread();
  tasks_.EnterLoop();
  int idle_polls = 0;
  // Where the pass under way began: the end of the one before (its clock reading reused, so a
  // pass costs no extra clock read), or the wake-up after a sleep.
  uint64_t pass_start = NowNs();
  stat_window_start_ns_ = pass_start;
  stat_window_start_ = sched_stat_.Read();
  while (!stop_.load(std::memory_order_acquire)) {
    if (PollOnce()) {
      busy_polls_.Add();
      pass_start = NowNs();
      policy_.OnWork(pass_start);
      WatchSchedStat(pass_start);
      idle_polls = 0;
      continue;
    }
    empty_polls_.Add();
    if (++idle_polls % kWatchCheckInterval == 0 && !watched_.empty()) {
      epoll_event events[16];
      int n = epoll_wait(epoll_fd_, events, 16, 0);
      if (n > 0) RunWatched(events, n);
    }
    if (policy_.KeepPolling(NowNs(), expecting_ > 0)) {
      // Polling that yields: free when the core is ours alone, and it does not starve the thread
      // (application, peer, NIC) whose work we are waiting for when cores are scarce. When the
      // yield cost a scheduler slice, the policy sleeps through the next gaps instead.
      yields_.Add();
      std::this_thread::yield();
      const uint64_t pass_end = NowNs();
      policy_.OnEmptyPass(pass_start, pass_end);
      WatchSchedStat(pass_end);
      pass_start = pass_end;
      continue;
    }
    Sleep();
    pass_start = NowNs();
  }
  // What is queued runs here; what is posted from now on runs on its poster.
  tasks_.Finish();
}

}  // namespace bx::engine
