#include "transport/tcp/tcp_listener.h"

#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

#include "transport/descriptor_budget.h"
#include "transport/refusal_log.h"
#include "transport/socket_util.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/tcp_socket.h"

namespace bx::tcp {
namespace {

// A connection must finish its handshake within this; a silent one then closes.
constexpr std::chrono::seconds kHandshakeTimeout{5};
// Descriptors a listener's handshakes may hold (two each: the socket and its timer), at most;
// the process's limit may make it fewer (transport/descriptor_budget.h).
constexpr size_t kMaxHandshakeDescriptors = 2048;
constexpr int kAcceptBatch = 8;

class Handshaker;

// The handshakes in progress, oldest first, at most `max`: a new connection beyond that evicts
// the oldest that has sent nothing yet (else the oldest), so idle sockets that never
// authenticate cannot take every descriptor and lock legitimate clients out,
// and a client part-way through its handshake is not pushed out by a stream of idle ones. The
// acceptor adds; handshakes end on any I/O thread.
class HandshakeRegistry {
 public:
  explicit HandshakeRegistry(size_t max) : max_(max) {}
  size_t max() const { return max_; }
  // Counts `h` in; returns the handshake to evict to make room for it (null: none).
  std::shared_ptr<Handshaker> Add(const std::shared_ptr<Handshaker>& h);
  // Removes and returns the handshake to evict (null: none): the oldest that has sent nothing,
  // else the oldest. Also for when accept ran out of descriptors.
  std::shared_ptr<Handshaker> TakeVictim();
  void Ended() { live_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  std::shared_ptr<Handshaker> TakeVictimLocked();
  const size_t max_;
  std::atomic<size_t> live_{0};
  std::mutex mu_;
  std::deque<std::weak_ptr<Handshaker>> order_;  // guarded by mu_; ended ones pruned lazily
};

// What an accepted connection needs once it passes; shared by the acceptor and the handshakes
// in flight, which may outlive it.
struct AcceptContext {
  TransportOptions options;
  AcceptHandler on_accept;
  std::shared_ptr<transport::PeerLimiter> limiter;
  transport::RefusalLog refusals{"bx tcp"};
  HandshakeRegistry handshakes{
      transport::UnauthenticatedDescriptorBudget(kMaxHandshakeDescriptors) / 2};
};

// One accepted connection running the accepting side of the handshake on its I/O thread,
// reading exactly one record at a time (never into the frames that follow). Holds nothing for
// the peer but itself and a timer until the peer passed; then hands the fd to a TcpSocket.
class Handshaker final : public IoThread::Handler, public std::enable_shared_from_this<Handshaker> {
 public:
  Handshaker(int fd, std::shared_ptr<IoThread> io_thread, std::shared_ptr<AcceptContext> context,
             std::string peer, std::string host)
      : fd_(fd),
        io_thread_(std::move(io_thread)),
        context_(std::move(context)),
        peer_(std::move(peer)),
        host_(std::move(host)),
        handshake_(context_->options.auth_secret, context_->options.privileged_secret) {}
  ~Handshaker() override {
    if (fd_ >= 0) ::close(fd_);
    Finish();
  }

  // Any thread (the acceptor's). On failure the fd is closed when the last reference goes.
  Status Start() {
    int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer < 0) return Status::FromErrno(errno, "timerfd_create");
    itimerspec when{};
    when.it_value.tv_sec = kHandshakeTimeout.count();
    timerfd_settime(timer, 0, &when, nullptr);
    timer_ = std::make_shared<Timer>(timer, weak_from_this());
    // The timer first: once the fd is watched, events may run on the I/O thread at once.
    if (Status s = io_thread_->Add(timer, EPOLLIN, timer_); !s.ok()) {
      ::close(timer);
      timer_->fd = -1;
      return s;
    }
    Status s = io_thread_->Add(fd_, EPOLLIN, shared_from_this());
    if (!s.ok()) {
      std::shared_ptr<Timer> t = timer_;
      io_thread_->Post([t, io = io_thread_] { t->Cancel(*io); });
    }
    return s;
  }

  void OnEvents(uint32_t) override {
    while (fd_ >= 0) {
      ssize_t n = recv(fd_, record_.data() + have_, record_.size() - have_, MSG_DONTWAIT);
      if (n == 0) return End(Aborted("peer closed the connection during the handshake"));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return;
        return End(Status::FromErrno(errno, "tcp handshake read"));
      }
      have_ += size_t(n);
      heard_.store(true, std::memory_order_relaxed);
      if (have_ < record_.size()) continue;
      have_ = 0;
      AcceptingHandshake::Step step = handshake_.OnRecord(record_);
      if (!step.reply.empty() && !SendAll(step.reply)) return;
      switch (step.outcome) {
        case AcceptingHandshake::Outcome::kContinue:
          continue;
        case AcceptingHandshake::Outcome::kRefused:
          return End(step.why);
        case AcceptingHandshake::Outcome::kAuthenticated:
          return Admit();
      }
    }
  }

  void Shutdown(const Status& reason) override { End(reason, /*log=*/false); }

  bool ended() const { return finished_.load(std::memory_order_acquire); }
  // The peer has sent part of its handshake: not an idle socket.
  bool heard() const { return heard_.load(std::memory_order_relaxed); }
  // Any thread: closes the connection, unaccepted, to make room for a newer one.
  void Evict() {
    const size_t max = context_->handshakes.max();
    io_thread_->Post([self = shared_from_this(), max] {
      self->End(ResourceExhausted("evicted before authenticating by newer connections (at most " +
                                  std::to_string(max) + " unauthenticated)"));
    });
  }

 private:
  // The handshake no longer holds descriptors of its own (closed, or handed to a socket).
  void Finish() {
    if (!finished_.exchange(true, std::memory_order_acq_rel)) context_->handshakes.Ended();
  }

  // The handshake's deadline: one timerfd, watched on the same I/O thread.
  struct Timer final : IoThread::Handler {
    Timer(int timer_fd, std::weak_ptr<Handshaker> owner) : fd(timer_fd), owner(std::move(owner)) {}
    void OnEvents(uint32_t) override {
      if (auto h = owner.lock()) h->End(DeadlineExceeded("no handshake within 5 s"));
    }
    void Shutdown(const Status&) override {
      if (auto h = owner.lock()) h->End(Aborted("tcp transport shut down"), false);
    }
    void Cancel(IoThread& io) {
      if (fd < 0) return;
      io.Remove(fd, this);
      ::close(fd);
      fd = -1;
    }
    int fd;
    std::weak_ptr<Handshaker> owner;
  };

  // The replies are a record or two on a fresh connection: the kernel takes them whole.
  bool SendAll(const std::string& bytes) {
    ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == ssize_t(bytes.size())) return true;
    End(n < 0 ? Status::FromErrno(errno, "tcp handshake send")
              : Aborted("tcp handshake: the kernel took a partial record"));
    return false;
  }

  void Admit() {
    std::optional<transport::PeerSlot> slot = context_->limiter->TryAcquire(host_);
    if (!slot) {
      (void)SendAll(AcceptingHandshake::Refuse(transport::auth::Refusal::kTooManyConnections));
      return End(ResourceExhausted(
          transport::auth::RefusalText(uint16_t(transport::auth::Refusal::kTooManyConnections))));
    }
    if (!SendAll(handshake_.Accept())) return;
    if (timer_) timer_->Cancel(*io_thread_);
    io_thread_->Remove(fd_, this);
    std::shared_ptr<TcpSocket> socket =
        TcpSocket::Create(fd_, io_thread_, context_->options, peer_);
    fd_ = -1;  // the socket owns it now
    Finish();
    socket->HoldPeerSlot(std::move(slot).value());
    if (handshake_.privileged()) socket->MarkPrivilegedPeer();
    io_thread_->Post(
        [socket, context = context_] { (void)socket->Start(context->on_accept(socket)); });
  }

  // Closes the connection unaccepted (on the I/O thread); idempotent.
  void End(const Status& why, bool log = true) {
    if (timer_) timer_->Cancel(*io_thread_);
    if (fd_ < 0) return;
    Finish();
    if (log) context_->refusals.Log(peer_, why);
    io_thread_->Remove(fd_, this);
    ::close(fd_);
    fd_ = -1;
  }

  int fd_;
  const std::shared_ptr<IoThread> io_thread_;
  const std::shared_ptr<AcceptContext> context_;
  const std::string peer_;
  const std::string host_;
  AcceptingHandshake handshake_;
  HandshakeRecord record_{};
  size_t have_ = 0;
  std::shared_ptr<Timer> timer_;
  std::atomic<bool> finished_{false};
  std::atomic<bool> heard_{false};
};

std::shared_ptr<Handshaker> HandshakeRegistry::TakeVictimLocked() {
  std::erase_if(order_, [](const std::weak_ptr<Handshaker>& w) {
    std::shared_ptr<Handshaker> h = w.lock();
    return !h || h->ended();
  });
  if (order_.empty()) return nullptr;
  size_t index = 0;
  for (size_t i = 0; i < order_.size(); ++i) {
    std::shared_ptr<Handshaker> h = order_[i].lock();
    if (h && !h->heard()) {
      index = i;
      break;
    }
  }
  std::shared_ptr<Handshaker> victim = order_[index].lock();
  order_.erase(order_.begin() + std::ptrdiff_t(index));
  return victim;
}

std::shared_ptr<Handshaker> HandshakeRegistry::Add(const std::shared_ptr<Handshaker>& h) {
  std::lock_guard lock(mu_);
  std::shared_ptr<Handshaker> victim;
  if (live_.load(std::memory_order_relaxed) >= max_) victim = TakeVictimLocked();
  live_.fetch_add(1, std::memory_order_relaxed);
  order_.push_back(h);
  return victim;
}

std::shared_ptr<Handshaker> HandshakeRegistry::TakeVictim() {
  std::lock_guard lock(mu_);
  return TakeVictimLocked();
}

}  // namespace

// The listening socket's epoll handler. Everything but Start runs on the first I/O thread.
class TcpListener::Acceptor final : public IoThread::Handler,
                                    public std::enable_shared_from_this<Acceptor> {
 public:
  Acceptor(int fd, std::vector<std::shared_ptr<IoThread>> io_threads,
           std::shared_ptr<AcceptContext> context)
      : fd_(fd), io_threads_(std::move(io_threads)), context_(std::move(context)) {}
  ~Acceptor() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Start() { return io_threads_.front()->Add(fd_, EPOLLIN, shared_from_this()); }
  IoThread& home() { return *io_threads_.front(); }

  void OnEvents(uint32_t) override {
    // A few at a time, then back to the I/O loop (epoll reports the rest again): the handshakes
    // just started read their first bytes in between, so a client that sent at once counts as
    // heard before a stream of idle connections could evict it.
    for (int accepted = 0; fd_ >= 0 && accepted < kAcceptBatch; ++accepted) {
      sockaddr_storage address{};
      socklen_t length = sizeof(address);
      int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&address), &length,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // EAGAIN: nothing more to accept. EMFILE and the like: the connection stays in the
        // backlog and epoll reports it again; free the descriptors of the oldest connection
        // that has not authenticated, if any, for it.
        if (errno == EMFILE || errno == ENFILE) {
          if (std::shared_ptr<Handshaker> victim = context_->handshakes.TakeVictim())
            victim->Evict();
        }
        return;
      }
      (void)transport::SetNoDelay(fd);  // a failure only costs latency
      std::shared_ptr<IoThread> io_thread = io_threads_[next_thread_++ % io_threads_.size()];
      const auto* sa = reinterpret_cast<sockaddr*>(&address);
      auto handshaker = std::make_shared<Handshaker>(fd, io_thread, context_,
                                                     transport::FormatAddress("tcp", sa, length),
                                                     transport::FormatHost(sa, length));
      // Counted before it starts (it may end on its I/O thread at once); a handshake that fails
      // to start closes its fd and leaves the count with its last reference.
      if (std::shared_ptr<Handshaker> victim = context_->handshakes.Add(handshaker)) {
        victim->Evict();
      }
      (void)handshaker->Start();
    }
  }

  void Shutdown(const Status&) override { CloseOnIoThread(); }

  void CloseOnIoThread() {
    if (fd_ < 0) return;
    home().Remove(fd_, this);
    ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  const std::vector<std::shared_ptr<IoThread>> io_threads_;
  const std::shared_ptr<AcceptContext> context_;
  size_t next_thread_ = 0;
};

Result<std::unique_ptr<TcpListener>> TcpListener::Start(
    int fd, std::string url, std::vector<std::shared_ptr<IoThread>> io_threads,
    const TransportOptions& options, std::shared_ptr<transport::PeerLimiter> limiter,
    AcceptHandler on_accept) {
  auto context = std::make_shared<AcceptContext>();
  context->options = options;
  context->on_accept = std::move(on_accept);
  context->limiter = std::move(limiter);
  auto acceptor = std::make_shared<Acceptor>(fd, std::move(io_threads), std::move(context));
  BX_RETURN_IF_ERROR(acceptor->Start());
  return std::unique_ptr<TcpListener>(new TcpListener(std::move(url), std::move(acceptor)));
}

TcpListener::~TcpListener() {
  Close();
}

void TcpListener::Close() {
  std::shared_ptr<Acceptor> acceptor = acceptor_;
  if (acceptor->home().IsCurrent()) {
    acceptor->CloseOnIoThread();
  } else if (IoThread::OnAnyIoThread()) {
    // Waiting for one I/O thread from another could deadlock: close soon rather than now.
    acceptor->home().Post([acceptor] { acceptor->CloseOnIoThread(); });
  } else {
    acceptor->home().RunAndWait([acceptor] { acceptor->CloseOnIoThread(); });
  }
}

}  // namespace bx::tcp
