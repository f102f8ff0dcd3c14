#include "transport/tcp/socket_util.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <cstdlib>

namespace bx::tcp {

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

std::string FormatAddress(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(address, length, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "tcp://?";
  }
  return Url{"tcp", host, static_cast<uint16_t>(std::atoi(port))}.ToString();
}

Status SetNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return Status::FromErrno(errno, "setsockopt(TCP_NODELAY)");
  }
  return Status::Ok();
}

}  // namespace bx::tcp
