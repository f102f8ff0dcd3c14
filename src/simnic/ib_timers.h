// InfiniBand timer encodings used by the simnic's RC transport model.
#pragma once

#include <cstdint>
#include <ctime>

namespace bx::simnic {

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// RNR NAK timer (IBA table 45): the delay a requester waits after a receiver-not-ready NAK before
// retrying. The responder advertises its min_rnr_timer (0..31) in the NAK.
inline uint64_t RnrTimerNs(uint8_t code) {
  static constexpr uint32_t kMicros[32] = {
      655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
      480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return uint64_t(kMicros[code & 31]) * 1000ull;
}

// Local ACK timeout: 4.096 us * 2^timeout; 0 means "wait forever" (returns 0).
inline uint64_t AckTimeoutNs(uint8_t timeout) {
  if (timeout == 0) return 0;
  if (timeout > 31) timeout = 31;
  return (4096ull << timeout);
}

// rnr_retry == 7 means retry forever.
inline constexpr uint8_t kInfiniteRnrRetry = 7;

}  // namespace bx::simnic
