// The embedded /metrics endpoint (bx/metrics.h): one thread, one connection at a time.
//
// Why not a library: Debian 12's libcpp-httplib-dev is not header-only (it pulls a shared
// library, OpenSSL, brotli and zlib headers) for what is one GET. What this server accepts is
// small: a request head of at most kMaxRequestHeadBytes, read within a deadline; it never reads
// a body and always closes the connection after answering.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "bx/metrics.h"
#include "metrics/http_request.h"

namespace bx::metrics {
namespace {

using Clock = std::chrono::steady_clock;

class HttpServer : public MetricsServer {
 public:
  HttpServer(Registry& registry, int listen_fd, int wake_fd, uint16_t port, int timeout_ms)
      : registry_(registry),
        listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        port_(port),
        timeout_ms_(timeout_ms),
        thread_([this] { Run(); }) {}

  ~HttpServer() override {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
    close(listen_fd_);
    close(wake_fd_);
  }

  uint16_t port() const override { return port_; }

 private:
  void Run() {
    while (true) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      if (poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents != 0) return;
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;  // the client went away, or out of descriptors: try again later
      Serve(fd);
      close(fd);
    }
  }

  // Reads the request head within the deadline; false on timeout, EOF, error or stop.
  bool ReadHead(int fd, Clock::time_point deadline, std::string* head, bool* too_large) {
    char buf[1024];
    while (head->find("\r\n\r\n") == std::string::npos) {
      if (head->size() >= kMaxRequestHeadBytes) {
        *too_large = true;
        return false;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      int r = poll(p, 2, int(left.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0 || p[1].revents != 0) return false;
      size_t room = std::min(sizeof(buf), kMaxRequestHeadBytes - head->size());
      ssize_t n = recv(fd, buf, room, 0);
      if (n <= 0) return false;
      head->append(buf, size_t(n));
    }
    head->resize(head->find("\r\n\r\n"));
    return true;
  }

  void Serve(int fd) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    timeval tv{timeout_ms_ / 1000, (timeout_ms_ % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // bounds a reader that stalls
    std::string head;
    bool too_large = false;
    if (!ReadHead(fd, deadline, &head, &too_large)) {
      if (too_large) Answer(fd, "431 Request Header Fields Too Large", "request head too large\n");
      return;
    }
    auto request = ParseRequestHead(head);
    if (!request.ok()) {
      Answer(fd, "400 Bad Request", request.status().message() + "\n");
    } else if (request->method != "GET" && request->method != "HEAD") {
      Answer(fd, "405 Method Not Allowed", "only GET and HEAD\n");
    } else if (request->path == "/metrics") {
      Answer(fd, "200 OK", registry_.ExposeText(), "text/plain; version=0.0.4; charset=utf-8",
             request->method == "HEAD");
    } else if (request->path == "/") {
      Answer(fd, "200 OK", "bexpress metrics: see /metrics\n");
    } else {
      Answer(fd, "404 Not Found", "not found; metrics are at /metrics\n");
    }
  }

  static void Answer(int fd, const std::string& status, const std::string& body,
                     const char* content_type = "text/plain; charset=utf-8",
                     bool head_only = false) {
    std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: " + content_type +
                      "\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n\r\n";
    if (!head_only) out += body;
    for (size_t sent = 0; sent < out.size();) {
      ssize_t n = send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the scraper left, or stalled past SO_SNDTIMEO
      sent += size_t(n);
    }
  }

  Registry& registry_;
  const int listen_fd_;
  const int wake_fd_;
  const uint16_t port_;
  const int timeout_ms_;
  std::thread thread_;  // last: starts after the fields it reads are set
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
  if (rc != 0 || listen(fd, 16) != 0) {
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
  return std::unique_ptr<MetricsServer>(new HttpServer(registry, fd, wake, port, timeout_ms));
}

}  // namespace bx::metrics
