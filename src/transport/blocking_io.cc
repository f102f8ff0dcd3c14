#include "transport/blocking_io.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <string>

namespace bx::transport {
namespace {

// Waits for `events` on `fd` until `deadline`: OK when ready, DeadlineExceeded otherwise.
Status WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline,
               const std::string& what) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return DeadlineExceeded("timed out waiting for " + what);
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, int(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno(errno, "poll");
    if (r > 0) return Status::Ok();
  }
}

}  // namespace

Status ReadExactly(int fd, uint8_t* buf, size_t n, std::chrono::steady_clock::time_point deadline,
                   const char* what, const char* connection) {
  size_t got = 0;
  while (got < n) {
    BX_RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline, what));
    ssize_t k = recv(fd, buf + got, n - got, MSG_DONTWAIT);
    if (k == 0)
      return Aborted(std::string("peer closed the ") + connection + " before sending " + what +
                     " (" + std::to_string(got) + " of " + std::to_string(n) + " bytes)");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::FromErrno(errno, std::string("receiving ") + what);
    }
    got += size_t(k);
  }
  return Status::Ok();
}

Status WriteAll(int fd, const uint8_t* buf, size_t n,
                std::chrono::steady_clock::time_point deadline, const char* what) {
  size_t sent = 0;
  while (sent < n) {
    ssize_t k = send(fd, buf + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        BX_RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, std::string("room to send ") + what));
        continue;
      }
      return Status::FromErrno(errno, std::string("sending ") + what);
    }
    sent += size_t(k);
  }
  return Status::Ok();
}

Status WriteAll(int fd, const uint8_t* buf, size_t n, const char* what) {
  size_t sent = 0;
  while (sent < n) {
    ssize_t k = send(fd, buf + sent, n - sent, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, std::string("sending ") + what);
    }
    sent += size_t(k);
  }
  return Status::Ok();
}

}  // namespace bx::transport
