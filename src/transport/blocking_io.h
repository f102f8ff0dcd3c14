// Exact reads and writes with a deadline on a stream socket (blocking or not), for the short
// handshakes both transports run before a connection carries messages.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "bx/status.h"

namespace bx::transport {

// Reads exactly `n` bytes (never more) before `deadline`; DeadlineExceeded, Aborted on EOF
// ("peer closed the <connection> before sending <what> (k of n bytes)") or the socket error.
Status ReadExactly(int fd, uint8_t* buf, size_t n, std::chrono::steady_clock::time_point deadline,
                   const char* what, const char* connection = "connection");
// Writes all `n` bytes before `deadline` (MSG_NOSIGNAL).
Status WriteAll(int fd, const uint8_t* buf, size_t n,
                std::chrono::steady_clock::time_point deadline, const char* what);
// Writes all `n` bytes on a blocking socket, as long as that takes (MSG_NOSIGNAL).
Status WriteAll(int fd, const uint8_t* buf, size_t n, const char* what);

}  // namespace bx::transport
