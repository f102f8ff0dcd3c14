// Log-linear histogram buckets (see HistogramOptions in bx/metrics.h).
//
// A positive value v is m * 2^e with m in [0.5, 1) (frexp). Its octave is e, and inside the
// octave [2^(e-1), 2^e) the sub-bucket is floor((2m - 1) * sub_buckets). Bucket 0 holds what lies
// below the octave of `min`; the last bucket holds what lies above the octave of `max`.
#include <cmath>

#include "bx/metrics.h"

namespace bx::metrics {

Histogram::Histogram(const HistogramOptions& options)
    : sub_buckets_(options.sub_buckets < 1 ? 1 : options.sub_buckets) {
  double min = options.min > 0 ? options.min : 1e-9;
  double max = options.max > min ? options.max : min;
  int max_exponent;
  std::frexp(min, &min_exponent_);
  std::frexp(max, &max_exponent);
  size_t octaves = size_t(max_exponent - min_exponent_ + 1);
  buckets_ = 1 + octaves * size_t(sub_buckets_) + 1;
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(buckets_);
}

size_t Histogram::BucketOf(double value) const {
  if (!(value > 0)) return 0;
  int exponent;
  double mantissa = std::frexp(value, &exponent);
  if (exponent < min_exponent_) return 0;
  size_t octave = size_t(exponent - min_exponent_);
  size_t sub = size_t((2 * mantissa - 1) * sub_buckets_);
  if (sub >= size_t(sub_buckets_)) sub = size_t(sub_buckets_) - 1;  // rounding at the top edge
  size_t bucket = 1 + octave * size_t(sub_buckets_) + sub;
  return bucket < buckets_ ? bucket : buckets_ - 1;
}

double Histogram::UpperBound(size_t bucket) const {
  if (bucket + 1 >= buckets_) return INFINITY;
  if (bucket == 0) return std::ldexp(1.0, min_exponent_ - 1);
  size_t octave = (bucket - 1) / size_t(sub_buckets_);
  size_t sub = (bucket - 1) % size_t(sub_buckets_);
  return std::ldexp(1.0 + double(sub + 1) / sub_buckets_, min_exponent_ + int(octave) - 1);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  counts_[BucketOf(value)].fetch_add(1, std::memory_order_relaxed);
  double sum = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(sum, sum + value, std::memory_order_relaxed)) {
  }
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  s.upper_bounds.resize(buckets_);
  s.counts.resize(buckets_);
  for (size_t b = 0; b < buckets_; ++b) {
    s.upper_bounds[b] = UpperBound(b);
    s.counts[b] = counts_[b].load(std::memory_order_relaxed);
    s.count += s.counts[b];
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

double HistogramSnapshot::Percentile(double q) const {
  if (count == 0) return 0;
  q = q < 0 ? 0 : (q > 1 ? 1 : q);
  double rank = q * double(count);
  uint64_t below = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    if (counts[b] == 0) continue;
    if (double(below + counts[b]) >= rank) {
      double lower = b == 0 ? 0 : upper_bounds[b - 1];
      double upper = upper_bounds[b];
      if (std::isinf(upper)) return lower;  // the overflow bucket: only its lower edge is known
      return lower + (upper - lower) * (rank - double(below)) / double(counts[b]);
    }
    below += counts[b];
  }
  return upper_bounds.size() > 1 ? upper_bounds[upper_bounds.size() - 2] : 0;
}

}  // namespace bx::metrics
