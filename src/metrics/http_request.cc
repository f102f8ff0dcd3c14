#include "metrics/http_request.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/connect_with_deadline.h"

namespace bx::metrics {
namespace {

// RFC 9110 token characters.
bool IsTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

}  // namespace

Result<HttpRequest> ParseRequestHead(std::string_view head) {
  if (head.size() > kMaxRequestHeadBytes) return InvalidArgument("request head too large");
  std::string_view line = head.substr(0, head.find("\r\n"));
  size_t first = line.find(' ');
  if (first == std::string_view::npos || first == 0)
    return InvalidArgument("request line has no method");
  size_t second = line.find(' ', first + 1);
  if (second == std::string_view::npos) return InvalidArgument("request line has no version");
  std::string_view method = line.substr(0, first);
  std::string_view target = line.substr(first + 1, second - first - 1);
  std::string_view version = line.substr(second + 1);
  if (!std::all_of(method.begin(), method.end(), IsTokenChar))
    return InvalidArgument("method is not a token");
  if (target.empty() || target[0] != '/') return InvalidArgument("target is not an absolute path");
  if (std::any_of(target.begin(), target.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; }))
    return InvalidArgument("target has control characters");
  if (version != "HTTP/1.0" && version != "HTTP/1.1")
    return InvalidArgument("unsupported HTTP version");
  HttpRequest request;
  request.method = std::string(method);
  request.path = std::string(target.substr(0, target.find('?')));
  return request;
}

namespace {

struct Url {
  std::string host, port, path;
};

Result<Url> ParseUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) return InvalidArgument("only http:// URLs: " + std::string(url));
  url.remove_prefix(kScheme.size());
  Url out;
  size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  out.path = slash == std::string_view::npos ? "/" : std::string(url.substr(slash));
  if (authority.starts_with('[')) {  // [v6 address]:port
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgument("bad IPv6 address in URL");
    out.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    out.port = authority.starts_with(':') ? std::string(authority.substr(1)) : "80";
  } else {
    size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    out.port = colon == std::string_view::npos ? "80" : std::string(authority.substr(colon + 1));
  }
  if (out.host.empty() || out.port.empty()) return InvalidArgument("URL lacks a host or port");
  return out;
}

}  // namespace

Result<std::string> HttpGet(std::string_view url_text, std::chrono::milliseconds timeout,
                            size_t max_bytes) {
  BX_ASSIGN_OR_RETURN(Url url, ParseUrl(url_text));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left_ms = [&deadline] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return int(std::max<int64_t>(0, left.count()));
  };
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &found); rc != 0)
    return Unavailable("resolving " + url.host + ": " + gai_strerror(rc));
  int fd = -1;
  Status error = Unavailable("no address");
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    Result<int> connected = ConnectWithDeadline(*a, deadline);
    if (connected.ok()) {
      fd = *connected;
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // reads wait with poll() below
    } else {
      error = connected.status();
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return Unavailable("connecting to " + std::string(url_text) + ": " + error.message());

  std::string request =
      "GET " + url.path + " HTTP/1.0\r\nHost: " + url.host + "\r\nConnection: close\r\n\r\n";
  std::string answer;
  Status status = Status::Ok();
  for (size_t sent = 0; sent < request.size() && status.ok();) {
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR) status = Status::FromErrno(errno, "sending the request");
    if (n > 0) sent += size_t(n);
  }
  char buf[16384];
  while (status.ok()) {
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, left_ms());
    if (r == 0)
      status = Status(StatusCode::kDeadlineExceeded, "no answer from " + std::string(url_text));
    if (r <= 0) {
      if (r < 0 && errno != EINTR) status = Status::FromErrno(errno, "poll");
      continue;
    }
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno != EINTR) status = Status::FromErrno(errno, "receiving the answer");
      continue;
    }
    answer.append(buf, size_t(n));
    if (answer.size() > max_bytes) status = ResourceExhausted("answer larger than the limit");
  }
  close(fd);
  if (!status.ok()) return status;
  size_t head_end = answer.find("\r\n\r\n");
  if (head_end == std::string::npos || !answer.starts_with("HTTP/1."))
    return DataLoss("malformed HTTP answer from " + std::string(url_text));
  std::string status_line = answer.substr(0, answer.find("\r\n"));
  if (status_line.size() < 12 || status_line.compare(9, 3, "200") != 0)
    return Unavailable(std::string(url_text) + " answered '" + status_line + "'");
  return answer.substr(head_end + 4);
}

}  // namespace bx::metrics
