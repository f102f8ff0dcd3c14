// A TCP connect that keeps to a deadline, for every layer that dials out (the tcp:// transport,
// the rdma:// bootstrap, the metrics client).
#pragma once

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "bx/status.h"

namespace bx {

// Connects a non-blocking, close-on-exec stream socket to `address`, waiting until `deadline`.
// A blocking connect would ignore the deadline: a server whose accept backlog is full drops
// SYNs, and the kernel retries them for about two minutes. Returns the fd, still non-blocking;
// DeadlineExceeded ("timed out") when the time ran out, the errno of socket, connect or poll
// otherwise. The caller owns the fd. Header-only, like thread_cpu_clock.h.
inline Result<int> ConnectWithDeadline(const addrinfo& address,
                                       std::chrono::steady_clock::time_point deadline) {
  int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    address.ai_protocol);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  auto fail = [fd](Status status) {
    ::close(fd);
    return status;
  };
  if (::connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return fail(Status::FromErrno(errno, "connect"));
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd waiting{fd, POLLOUT, 0};
      int ready = ::poll(&waiting, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) return fail(Status::FromErrno(errno, "poll"));
      if (ready == 0) return fail(Status(StatusCode::kDeadlineExceeded, "timed out"));
      break;
    }
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) return fail(Status::FromErrno(error, "connect"));
  }
  return fd;
}

}  // namespace bx
