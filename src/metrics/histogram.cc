// Log-linear histogram buckets (see HistogramOptions in bx/metrics.h): the scheme is
// base/log_linear_buckets.h, with the octave of `min` as its first and the octave of `max` as its
// last, so bucket 0 holds what lies below the octave of `min` and the last bucket what lies above
// the octave of `max`.
#include <cmath>

#include "base/log_linear_buckets.h"
#include "bx/metrics.h"

namespace bx::metrics {

Histogram::Histogram(const HistogramOptions& options)
    : sub_buckets_(options.sub_buckets < 1 ? 1 : options.sub_buckets) {
  double min = options.min > 0 ? options.min : 1e-9;
  double max = options.max > min ? options.max : min;
  // frexp(v) = m * 2^e with m in [0.5, 1): v lies in the octave [2^(e-1), 2^e).
  int min_frexp_exponent, max_frexp_exponent;
  std::frexp(min, &min_frexp_exponent);
  std::frexp(max, &max_frexp_exponent);
  min_exponent_ = min_frexp_exponent - 1;
  octaves_ = max_frexp_exponent - min_frexp_exponent + 1;
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(
      LogLinearBuckets(min_exponent_, octaves_, sub_buckets_).size());
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  const size_t bucket = LogLinearBuckets(min_exponent_, octaves_, sub_buckets_).IndexOf(value);
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  double sum = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(sum, sum + value, std::memory_order_relaxed)) {
  }
}

HistogramSnapshot Histogram::Snapshot() const {
  const LogLinearBuckets buckets(min_exponent_, octaves_, sub_buckets_);
  HistogramSnapshot s;
  s.upper_bounds = buckets.UpperBounds();
  s.counts.resize(buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    s.counts[b] = counts_[b].load(std::memory_order_relaxed);
    s.count += s.counts[b];
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

double HistogramSnapshot::Percentile(double q) const {
  return PercentileOfBuckets(counts, upper_bounds, q, BucketPercentile::kInterpolated);
}

}  // namespace bx::metrics
