// Retry policy pieces: the per-client retry budget and the backoff schedule.
// Thread-compatible: the client calls them under its own mutex.
#pragma once

#include <algorithm>
#include <chrono>
#include <random>

#include "bx/rpc.h"

namespace bx::rpc {

// A token bucket: every call deposits `ratio` tokens (up to `max_tokens`), every retry withdraws
// one. In steady state retries stay below ratio x calls; during a full outage at most max_tokens
// + ratio x calls retries happen, so retries cannot multiply the load on a struggling service.
class RetryBudget {
 public:
  RetryBudget(double ratio, double max_tokens)
      : ratio_(ratio), max_tokens_(max_tokens), tokens_(max_tokens) {}
  void OnCall() { tokens_ = std::min(max_tokens_, tokens_ + ratio_); }
  bool TryWithdraw() {
    if (tokens_ < 1.0) return false;
    tokens_ -= 1.0;
    return true;
  }
  double tokens() const { return tokens_; }

 private:
  double ratio_;
  double max_tokens_;
  double tokens_;
};

// Exponential backoff with jitter: attempt n (1 = first retry) waits
// min(max, initial * multiplier^(n-1)) scaled by a uniform factor in [1 - jitter, 1], so that
// clients that failed together do not retry together.
inline std::chrono::microseconds Backoff(const RetryOptions& options, int retry,
                                         std::mt19937_64& rng) {
  double base = static_cast<double>(options.initial_backoff.count());
  for (int i = 1; i < retry; ++i) base *= options.multiplier;
  base = std::min(base, static_cast<double>(options.max_backoff.count()));
  std::uniform_real_distribution<double> factor(1.0 - std::clamp(options.jitter, 0.0, 1.0), 1.0);
  return std::chrono::microseconds(static_cast<int64_t>(base * factor(rng)));
}

}  // namespace bx::rpc
