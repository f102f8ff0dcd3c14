// TransferTime: how long `bytes` take at `bytes_per_second`, for deadlines and liveness bounds
// that must grow with the size of what is moving (a 64 MiB push, a 1 GiB fetch reply) rather
// than expire while a live peer is still taking it in. Header-only.
#pragma once

#include <chrono>
#include <cstdint>

namespace bx {

// 0 when `bytes_per_second` is 0 (no allowance for size).
inline std::chrono::microseconds TransferTime(uint64_t bytes, uint64_t bytes_per_second) {
  if (bytes_per_second == 0) return std::chrono::microseconds(0);
  return std::chrono::microseconds(uint64_t(double(bytes) / double(bytes_per_second) * 1e6));
}

}  // namespace bx
