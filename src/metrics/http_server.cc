// The embedded /metrics endpoint (bx/metrics.h): one thread serving up to max_connections
// connections at once with non-blocking sockets and poll(), so a slow or silent scraper holds a
// descriptor, not the endpoint. Past the bound the oldest connection is dropped for the new one.
//
// Why not a library: Debian 12's libcpp-httplib-dev is not header-only (it pulls a shared
// library, OpenSSL, brotli and zlib headers) for what is one GET. What this server accepts is
// small: a request head of at most kMaxRequestHeadBytes, read within a deadline; it never reads
// a body and always closes the connection after answering, which must also be taken within a
// deadline.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "bx/metrics.h"
#include "metrics/http_request.h"

namespace bx::metrics {
namespace {

using Clock = std::chrono::steady_clock;

// One scraper: its request head as it arrives, then the answer as it leaves.
struct Connection {
  int fd;
  Clock::time_point deadline;  // for the head, then (renewed) for the answer
  std::string head;
  std::string answer;
  size_t sent = 0;
  bool answering() const { return !answer.empty(); }
};

std::string Answer(const std::string& status, const std::string& body,
                   const char* content_type = "text/plain; charset=utf-8", bool head_only = false) {
  std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: " + content_type +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n\r\n";
  if (!head_only) out += body;
  return out;
}

class HttpServer : public MetricsServer {
 public:
  HttpServer(Registry& registry, int listen_fd, int wake_fd, uint16_t port, int timeout_ms,
             size_t max_connections)
      : registry_(registry),
        listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        port_(port),
        timeout_(timeout_ms),
        max_connections_(max_connections),
        thread_([this] { Run(); }) {}

  ~HttpServer() override {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
    for (Connection& c : connections_) close(c.fd);
    close(listen_fd_);
    close(wake_fd_);
  }

  uint16_t port() const override { return port_; }

 private:
  void Run() {
    std::vector<pollfd> fds;
    while (true) {
      fds.clear();
      fds.push_back({listen_fd_, POLLIN, 0});
      fds.push_back({wake_fd_, POLLIN, 0});
      for (const Connection& c : connections_)
        fds.push_back({c.fd, short(c.answering() ? POLLOUT : POLLIN), 0});
      if (poll(fds.data(), fds.size(), WaitMs()) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      // Connections first (their pollfds follow the listener's and the wake fd's, in order),
      // then accepts, which may drop the oldest.
      for (size_t i = connections_.size(); i-- > 0;) {
        if (fds[i + 2].revents != 0 && !Progress(connections_[i])) Drop(i);
      }
      const auto now = Clock::now();
      for (size_t i = connections_.size(); i-- > 0;) {
        if (connections_[i].deadline <= now) Drop(i);  // a silent or stalled scraper
      }
      if (fds[0].revents != 0) AcceptAll();
    }
  }

  int WaitMs() const {
    if (connections_.empty()) return -1;
    auto next = std::min_element(connections_.begin(), connections_.end(),
                                 [](const Connection& a, const Connection& b) {
                                   return a.deadline < b.deadline;
                                 })
                    ->deadline;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now());
    return int(std::max<int64_t>(0, left.count()));
  }

  void AcceptAll() {
    while (true) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        // Out of descriptors: the oldest scraper makes room for the next try.
        if ((errno == EMFILE || errno == ENFILE) && !connections_.empty()) Drop(0);
        return;  // EAGAIN, or a client that went away
      }
      if (connections_.size() >= max_connections_) Drop(0);
      connections_.push_back(Connection{fd, Clock::now() + timeout_, {}, {}, 0});
    }
  }

  void Drop(size_t i) {
    close(connections_[i].fd);
    connections_.erase(connections_.begin() + ptrdiff_t(i));
  }

  // Reads or writes what the socket allows; false when the connection is done with.
  bool Progress(Connection& c) {
    if (c.answering()) return Write(c);
    char buf[4096];
    size_t room = std::min(sizeof(buf), kMaxRequestHeadBytes - c.head.size());
    ssize_t n = recv(c.fd, buf, room, 0);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (n == 0) return false;  // the scraper left before finishing its request
    c.head.append(buf, size_t(n));
    size_t end = c.head.find("\r\n\r\n");
    if (end != std::string::npos) {
      c.head.resize(end);
      c.answer = Respond(c.head);
    } else if (c.head.size() >= kMaxRequestHeadBytes) {
      c.answer = Answer("431 Request Header Fields Too Large", "request head too large\n");
    } else {
      return true;
    }
    c.deadline = Clock::now() + timeout_;  // a fresh deadline to take the answer
    return Write(c);
  }

  static bool Write(Connection& c) {
    while (c.sent < c.answer.size()) {
      ssize_t n = send(c.fd, c.answer.data() + c.sent, c.answer.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;  // the rest when the socket drains
      if (n <= 0) return false;                   // the scraper left
      c.sent += size_t(n);
    }
    return false;  // all sent: close
  }

  std::string Respond(const std::string& head) {
    auto request = ParseRequestHead(head);
    if (!request.ok()) return Answer("400 Bad Request", request.status().message() + "\n");
    if (request->method != "GET" && request->method != "HEAD")
      return Answer("405 Method Not Allowed", "only GET and HEAD\n");
    if (request->path == "/metrics") {
      return Answer("200 OK", registry_.ExposeText(), "text/plain; version=0.0.4; charset=utf-8",
                    request->method == "HEAD");
    }
    if (request->path == "/") return Answer("200 OK", "bexpress metrics: see /metrics\n");
    return Answer("404 Not Found", "not found; metrics are at /metrics\n");
  }

  Registry& registry_;
  const int listen_fd_;
  const int wake_fd_;
  const uint16_t port_;
  const std::chrono::milliseconds timeout_;
  const size_t max_connections_;
  std::deque<Connection> connections_;  // oldest first (loop thread only)
  std::thread thread_;                  // last: starts after the fields it reads are set
};

}  // namespace

Result<std::unique_ptr<MetricsServer>> StartHttpServer(const HttpServerOptions& options,
                                                       Registry& registry) {
  sockaddr_in6 addr6{};
  sockaddr_in addr4{};
  bool v6 = options.address.find(':') != std::string::npos;
  if (v6) {
    addr6.sin6_family = AF_INET6;
    addr6.sin6_port = htons(options.port);
    if (inet_pton(AF_INET6, options.address.c_str(), &addr6.sin6_addr) != 1)
      return InvalidArgument("metrics: bad listen address " + options.address);
  } else {
    addr4.sin_family = AF_INET;
    addr4.sin_port = htons(options.port);
    if (inet_pton(AF_INET, options.address.c_str(), &addr4.sin_addr) != 1)
      return InvalidArgument("metrics: bad listen address " + options.address);
  }
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "metrics: socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc = v6 ? bind(fd, reinterpret_cast<sockaddr*>(&addr6), sizeof(addr6))
              : bind(fd, reinterpret_cast<sockaddr*>(&addr4), sizeof(addr4));
  if (options.max_connections < 1) {
    close(fd);
    return InvalidArgument("metrics: max_connections must be at least 1");
  }
  if (rc != 0 || listen(fd, 64) != 0) {
    Status s = Status::FromErrno(
        errno, "metrics: listening on " + options.address + ":" + std::to_string(options.port));
    close(fd);
    return s;
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  uint16_t port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    Status s = Status::FromErrno(errno, "metrics: eventfd");
    close(fd);
    return s;
  }
  int timeout_ms = options.request_timeout_ms > 0 ? options.request_timeout_ms : 2000;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);  // accepts until EAGAIN
  return std::unique_ptr<MetricsServer>(
      new HttpServer(registry, fd, wake, port, timeout_ms, size_t(options.max_connections)));
}

}  // namespace bx::metrics
