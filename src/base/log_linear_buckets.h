// LogLinearBuckets: the one bucket scheme of the library's histograms (rpc::LatencyHistogram in
// microseconds, metrics::Histogram in seconds), and PercentileOfBuckets, the one way to read a
// percentile back from a histogram's bucket counts.
//
// Log-linear: each power of two ("octave") [2^k, 2^(k+1)) from 2^min_exponent on is cut into
// `sub_buckets` equal parts, so a bucket is at most 1/sub_buckets of its lower edge wide at any
// scale (12.5% with 8), with few buckets: 8 per octave cover 1 us to 50 days in 338. The indexes:
//
//   0                              below 2^min_exponent (and 0, negative values)
//   1 + octave * sub_buckets + s   [2^k * (1 + s/sub_buckets), 2^k * (1 + (s+1)/sub_buckets)),
//                                  k = min_exponent + octave, 0 <= octave < octaves
//   size() - 1                     2^(min_exponent + octaves) and above (overflow, +infinity)
//
// Pure functions of their arguments: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace bx {

class LogLinearBuckets {
 public:
  // sub_buckets >= 1, octaves >= 0.
  constexpr LogLinearBuckets(int min_exponent, int octaves, int sub_buckets)
      : min_exponent_(min_exponent), octaves_(octaves), sub_buckets_(sub_buckets) {}

  // Buckets in all, the underflow and overflow buckets included.
  constexpr size_t size() const { return size_t(octaves_) * size_t(sub_buckets_) + 2; }
  // The bucket that holds `value`. NaN lands in bucket 0: a caller that must not count it
  // checks first.
  size_t IndexOf(double value) const;
  // The exclusive upper edge of bucket `index` (the lower edge of the next one); +infinity for
  // the overflow bucket.
  double UpperBound(size_t index) const;
  // UpperBound of every bucket, in order.
  std::vector<double> UpperBounds() const;

 private:
  int min_exponent_;
  int octaves_;
  int sub_buckets_;
};

// How PercentileOfBuckets turns the bucket that holds the wanted rank into a value. The two
// histograms answer different questions, and what they print is compared across runs, so both
// readings stay:
enum class BucketPercentile {
  // rpc::LatencyHistogram (bx bench rpc, the demo, the observe quantile gauges): the sample of
  // rank floor(q * (n - 1)) + 1 (rank 1 the smallest), reported as the upper edge of its bucket:
  // never below the true value and at most one bucket width above it, so a latency bound read
  // off it is never optimistic. The overflow bucket gives +infinity; a caller that knows the
  // largest value caps the result with it.
  kUpperEdge,
  // metrics::HistogramSnapshot (as Prometheus' histogram_quantile reads a histogram): the real
  // rank q * n, placed linearly between the lower and upper edge of its bucket (the lower edge
  // of bucket 0 is taken as 0); in the overflow bucket, whose upper edge is unknown, its lower
  // edge. A smooth estimate, possibly below the true value.
  kInterpolated,
};

// The value below which a fraction `q` (clamped to 0..1) of the counted observations lie, read
// as `how` says from `counts` (observations per bucket, not cumulative) and `upper_bounds`
// (the upper edge of each bucket, increasing, the last one possibly +infinity; as many as
// counts). 0 when nothing is counted.
double PercentileOfBuckets(std::span<const uint64_t> counts, std::span<const double> upper_bounds,
                           double q, BucketPercentile how);

}  // namespace bx
