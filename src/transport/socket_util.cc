#include "transport/socket_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "base/connect_with_deadline.h"

namespace bx::transport {

Result<AddressList> Resolve(const Url& url, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  std::string port = std::to_string(url.port);
  int error = getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found);
  if (error != 0) {
    return Unavailable("cannot resolve " + url.ToString() + ": " + gai_strerror(error));
  }
  return AddressList(found, &freeaddrinfo);
}

std::string FormatAddress(std::string_view scheme, const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(address, length, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return std::string(scheme) + "://?";
  }
  return Url{std::string(scheme), host, static_cast<uint16_t>(std::atoi(port))}.ToString();
}

std::string FormatHost(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST];
  if (getnameinfo(address, length, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  std::string text = host;
  if (text.starts_with("::ffff:") && text.find('.') != std::string::npos) text.erase(0, 7);
  return text;
}

Status SetNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return Status::FromErrno(errno, "setsockopt(TCP_NODELAY)");
  }
  return Status::Ok();
}

void SetBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

Result<int> ConnectOne(const addrinfo& address, std::chrono::steady_clock::time_point deadline,
                       const std::string& url) {
  Result<int> fd = ConnectWithDeadline(address, deadline);
  if (!fd.ok()) return fd.status().WithContext("connect " + url);
  (void)SetNoDelay(*fd);  // a failure only costs latency
  return fd;
}

Result<ConnectedSocket> ConnectFirst(const Url& url,
                                     std::chrono::steady_clock::time_point deadline) {
  BX_ASSIGN_OR_RETURN(AddressList addresses, Resolve(url, /*passive=*/false));
  Status last_error = Unavailable("connect " + url.ToString() + ": no address");
  for (const addrinfo* address = addresses.get(); address; address = address->ai_next) {
    Result<int> fd = ConnectOne(*address, deadline, url.ToString());
    if (fd.ok())
      return ConnectedSocket{*fd, FormatAddress(url.scheme, address->ai_addr, address->ai_addrlen)};
    last_error = fd.status();
  }
  return last_error;
}

Result<ListeningSocket> ListenOn(const Url& url, int backlog) {
  BX_ASSIGN_OR_RETURN(AddressList addresses, Resolve(url, /*passive=*/true));
  const addrinfo& address = *addresses.get();
  int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    address.ai_protocol);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (::bind(fd, address.ai_addr, address.ai_addrlen) != 0 || ::listen(fd, backlog) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    Status status = Status::FromErrno(errno, "listen on " + url.ToString());
    ::close(fd);
    return status;
  }
  Url listening = url;
  listening.port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return ListeningSocket{fd, listening};
}

}  // namespace bx::transport
