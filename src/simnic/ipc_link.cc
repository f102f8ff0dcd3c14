#include "simnic/ipc_link.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <span>
#include <string>
#include <vector>

namespace bx::simnic {
namespace {

// A process's fabric address: the abstract socket @bxsim.<pid> (one per network namespace), or,
// with BX_SIM_FABRIC_DIR, the socket file <dir>/bxsim.<pid>, which processes in different
// network namespaces share (the multi-host tests put each "host" in a namespace of its own; the
// fabric then joins them as a switch would, whatever their IP routes say).
socklen_t FabricAddress(uint32_t pid, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  const char* dir = std::getenv("BX_SIM_FABRIC_DIR");
  if (dir != nullptr && *dir != '\0') {
    int n = std::snprintf(addr->sun_path, sizeof(addr->sun_path), "%s/bxsim.%u", dir, pid);
    if (n <= 0 || size_t(n) >= sizeof(addr->sun_path)) return 0;  // too long: no fabric
    return socklen_t(offsetof(sockaddr_un, sun_path) + size_t(n) + 1);
  }
  int n = std::snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "bxsim.%u", pid);
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n);
}

std::string Describe(const sockaddr_un& addr) {
  const bool abstract = addr.sun_path[0] == '\0';
  char text[sizeof(addr.sun_path) + 1];
  std::snprintf(text, sizeof(text), "%s%s", abstract ? "@" : "",
                abstract ? addr.sun_path + 1 : addr.sun_path);
  return text;
}

// Socket buffers large enough that a stream of MTU-to-megabyte frames keeps moving.
constexpr int kSocketBufferBytes = 4 << 20;

IpcCookie FabricCookie() {
  const char* text = std::getenv("BX_SIM_FABRIC_COOKIE");
  return MakeIpcCookie(text != nullptr ? text : "");
}

}  // namespace

IpcLink::IpcLink(uint32_t pid, std::function<void()> wake)
    : pid_(pid), cookie_(FabricCookie()), wake_(std::move(wake)) {
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr;
  socklen_t len = FabricAddress(pid_, &addr);
  if (len != 0 && addr.sun_path[0] != '\0') {
    unlink(addr.sun_path);  // left by an earlier process with this pid
    path_ = addr.sun_path;
  }
  if (listen_fd_ < 0 || len == 0 ||
      bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listen_fd_, 128) != 0) {
    std::fprintf(stderr, "simnic: inter-process fabric disabled: cannot listen on %s: %s\n",
                 len == 0 ? "BX_SIM_FABRIC_DIR (path too long)" : Describe(addr).c_str(),
                 std::strerror(errno));
    if (listen_fd_ >= 0) close(listen_fd_);
    listen_fd_ = -1;
    return;
  }
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  settle_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ev.data.fd = settle_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, settle_fd_, &ev);
  reader_ = std::thread([this] { ReadLoop(); });
  reader_.detach();  // lives as long as the process, like the hardware thread
}

IpcLink::~IpcLink() {
  if (!path_.empty()) unlink(path_.c_str());
}

void IpcLink::RefusePeer(pid_t pid, uid_t uid) {
  if (refused_peers_.fetch_add(1, std::memory_order_relaxed) == 0) {
    std::fprintf(stderr,
                 "simnic: refused a fabric connection from pid %d (uid %u, not ours: %u); later "
                 "ones are counted, not logged\n",
                 int(pid), unsigned(uid), unsigned(geteuid()));
  }
}

int IpcLink::ConnectTo(uint32_t pid) {
  auto it = outgoing_.find(pid);
  if (it != outgoing_.end()) return it->second;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr;
  socklen_t len = FabricAddress(pid, &addr);
  if (len == 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    close(fd);
    return -1;
  }
  int size = kSocketBufferBytes;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  // The cookie first: the peer reads nothing else from a connection until it has matched.
  if (send(fd, cookie_.data(), cookie_.size(), MSG_NOSIGNAL) != ssize_t(cookie_.size())) {
    close(fd);
    return -1;
  }
  outgoing_[pid] = fd;
  // Watched by the reader: the peer closing our outgoing connection (it refused us, or died
  // before ever connecting back) is the peer lost, so that requests it will never answer retry
  // and fail as on a fabric where the far end went silent.
  {
    std::lock_guard lock(watch_mu_);
    outgoing_watch_[fd] = pid;
  }
  epoll_event ev{};
  ev.events = EPOLLRDHUP;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  return fd;
}

void IpcLink::CloseOutgoing(uint32_t pid, int fd) {
  {
    std::lock_guard lock(watch_mu_);
    outgoing_watch_.erase(fd);
  }
  close(fd);  // also leaves the epoll set
  outgoing_.erase(pid);
}

bool IpcLink::Send(uint32_t pid, const IpcHeader& header, const iovec* payload, int count) {
  if (listen_fd_ < 0) return false;
  int fd = ConnectTo(pid);
  if (fd < 0) return false;
  iovec iov[1 + 16];
  iov[0] = iovec{const_cast<IpcHeader*>(&header), sizeof(header)};
  int n = 1;
  for (int i = 0; i < count && n < 17; ++i) iov[n++] = payload[i];
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = size_t(n);
  while (msg.msg_iovlen > 0) {
    ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      CloseOutgoing(pid, fd);
      return false;
    }
    // Advance past what was written.
    size_t left = size_t(w);
    while (left > 0 && msg.msg_iovlen > 0) {
      if (left >= msg.msg_iov->iov_len) {
        left -= msg.msg_iov->iov_len;
        ++msg.msg_iov;
        --msg.msg_iovlen;
      } else {
        msg.msg_iov->iov_base = static_cast<uint8_t*>(msg.msg_iov->iov_base) + left;
        msg.msg_iov->iov_len -= left;
        left = 0;
      }
    }
  }
  return true;
}

void IpcLink::Drain(std::vector<IpcFrame>* frames, std::vector<uint32_t>* lost_peers) {
  std::lock_guard lock(inbound_mu_);
  while (!inbound_.empty()) {
    frames->push_back(std::move(inbound_.front()));
    inbound_.pop_front();
  }
  lost_peers->swap(lost_);
  lost_.clear();
  has_inbound_.store(false, std::memory_order_release);
}

bool IpcLink::HasInbound() const {
  return has_inbound_.load(std::memory_order_acquire);
}

void IpcLink::Settle() {
  if (listen_fd_ < 0 || settle_fd_ < 0) return;
  std::unique_lock lock(settle_mu_);
  const uint64_t ticket = ++settle_asked_;
  const uint64_t one = 1;
  ssize_t n = write(settle_fd_, &one, sizeof(one));
  (void)n;
  settle_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return settle_served_ >= ticket; });
}

void IpcLink::ServeSettle() {
  uint64_t count = 0;
  ssize_t n = read(settle_fd_, &count, sizeof(count));
  (void)n;
  uint64_t asked;
  {
    std::lock_guard lock(settle_mu_);
    asked = settle_asked_;  // requests made before this read of the connections
  }
  std::vector<int> fds;
  for (const auto& [fd, parser] : incoming_) fds.push_back(fd);
  for (int fd : fds) {
    auto it = incoming_.find(fd);
    if (it != incoming_.end()) ReadFrom(fd, it->second);
  }
  {
    std::lock_guard lock(settle_mu_);
    settle_served_ = asked;
  }
  settle_cv_.notify_all();
}

void IpcLink::ReadFrom(int fd, IpcFrameParser& parser) {
  // What the socket has now, up to 4 MiB a turn (epoll comes back for the rest, after the other
  // peers): a peer that sent half a frame holds its own connection, not the reader.
  constexpr size_t kTurnBytes = size_t{4} << 20;
  std::vector<IpcFrame> frames;
  bool open = true;
  for (size_t taken = 0; taken < kTurnBytes;) {
    std::span<uint8_t> into = parser.Next();
    ssize_t r = into.empty() ? 0 : recv(fd, into.data(), into.size(), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (r <= 0 || !parser.Commit(size_t(r), &frames)) {
      open = false;  // closed, failed, or refused by the parser
      break;
    }
    taken += size_t(r);
  }
  uint32_t lost = 0;
  if (!open) {
    // A peer that went away, or broke the framing, is lost to its QPs; a stranger without the
    // cookie, or a frame forged in another process's name, says nothing about a peer.
    if (!parser.impostor()) lost = parser.peer_pid();
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    incoming_.erase(fd);  // `parser` is gone from here on
  }
  Deliver(frames, lost);
}

void IpcLink::Deliver(std::vector<IpcFrame>& frames, uint32_t lost) {
  if (frames.empty() && lost == 0) return;
  {
    std::lock_guard lock(inbound_mu_);
    for (IpcFrame& frame : frames) inbound_.push_back(std::move(frame));
    if (lost != 0) lost_.push_back(lost);
    has_inbound_.store(true, std::memory_order_release);
  }
  wake_();
}

void IpcLink::OutgoingClosed(int fd) {
  uint32_t pid = 0;
  {
    std::lock_guard lock(watch_mu_);
    auto it = outgoing_watch_.find(fd);
    if (it == outgoing_watch_.end()) return;  // closed by the hardware thread meanwhile
    pid = it->second;
    outgoing_watch_.erase(it);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);  // the hardware thread closes it
  }
  std::vector<IpcFrame> none;
  Deliver(none, pid);
}

void IpcLink::ReadLoop() {
  pthread_setname_np(pthread_self(), "bxsim-ipc");
  reader_cpu_clock_.CaptureCurrentThread();
  epoll_event events[16];
  for (;;) {
    int n = epoll_wait(epoll_fd_, events, 16, -1);
    if (n < 0) continue;
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (conn < 0) continue;
        // Only this user's processes are on our fabric: abstract sockets have no permissions,
        // and the hardware thread trusts the frames of a peer it accepted.
        ucred peer{};
        socklen_t peer_length = sizeof(peer);
        if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &peer_length) != 0 ||
            peer.uid != geteuid()) {
          RefusePeer(peer.pid, peer.uid);
          close(conn);
          continue;
        }
        int size = kSocketBufferBytes;
        setsockopt(conn, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
        incoming_.emplace(conn, IpcFrameParser(uint32_t(peer.pid), cookie_));
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = conn;
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, conn, &ev);
        continue;
      }
      if (fd == settle_fd_) {
        ServeSettle();
        continue;
      }
      auto it = incoming_.find(fd);
      if (it != incoming_.end()) {
        ReadFrom(fd, it->second);
      } else {
        OutgoingClosed(fd);
      }
    }
  }
}

}  // namespace bx::simnic
