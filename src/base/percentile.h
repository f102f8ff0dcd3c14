// Percentile: the exact percentile of a set of samples, the one rule every tool and simulation
// of the library reports latencies with. (A histogram that keeps buckets instead of samples reads
// its percentiles with PercentileOfBuckets, base/log_linear_buckets.h.)
//
// The rule is nearest rank: the q-percentile (q from 0 to 1) of n samples is the sample of rank
// ceil(q * n) in increasing order, rank 1 being the smallest: the smallest sample that at least
// a fraction q of the samples are at or below. q = 0 gives the smallest sample, q = 1 the
// largest, and the result is always one of the samples (never an interpolation). Header-only,
// thread-compatible.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace bx {

// The 0-based position of the q-percentile among n > 0 sorted samples.
inline size_t PercentileIndex(size_t n, double q) {
  if (!(q > 0)) return 0;  // and NaN
  if (q >= 1) return n - 1;
  // q * n is rounded: a product that lands a hair above a whole number (0.07 * 100 gives
  // 7.000000000000001) is taken as that number, so that the rank does not jump by one.
  const double exact = q * double(n);
  const size_t rank = size_t(std::ceil(exact - exact * 1e-12));
  return std::clamp<size_t>(rank, 1, n) - 1;
}

// The q-percentile of `samples`, by the rule above; T{} when there are none. Reorders the
// samples (std::nth_element: linear time, and quick on samples already sorted), so one vector
// may be asked for several percentiles in turn, sorted or not.
template <typename T>
T Percentile(std::vector<T>& samples, double q) {
  if (samples.empty()) return T{};
  const auto nth = samples.begin() + std::ptrdiff_t(PercentileIndex(samples.size(), q));
  std::nth_element(samples.begin(), nth, samples.end());
  return *nth;
}

}  // namespace bx
