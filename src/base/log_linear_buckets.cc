#include "base/log_linear_buckets.h"

#include <cmath>

namespace bx {

size_t LogLinearBuckets::IndexOf(double value) const {
  if (!(value > 0)) return 0;
  if (std::isinf(value)) return size() - 1;  // frexp leaves the exponent of infinity unspecified
  // value = mantissa * 2^exponent with mantissa in [0.5, 1): it lies in the octave
  // [2^(exponent-1), 2^exponent), and 2 * mantissa - 1 is where in it, from 0 to just below 1.
  int exponent;
  const double mantissa = std::frexp(value, &exponent);
  const int octave = exponent - 1 - min_exponent_;
  if (octave < 0) return 0;
  if (octave >= octaves_) return size() - 1;
  size_t sub = size_t((2 * mantissa - 1) * sub_buckets_);
  if (sub >= size_t(sub_buckets_)) sub = size_t(sub_buckets_) - 1;  // rounding at the top edge
  return 1 + size_t(octave) * size_t(sub_buckets_) + sub;
}

double LogLinearBuckets::UpperBound(size_t index) const {
  if (index + 1 >= size()) return INFINITY;
  if (index == 0) return std::ldexp(1.0, min_exponent_);
  const size_t octave = (index - 1) / size_t(sub_buckets_);
  const size_t sub = (index - 1) % size_t(sub_buckets_);
  return std::ldexp(1.0 + double(sub + 1) / sub_buckets_, min_exponent_ + int(octave));
}

std::vector<double> LogLinearBuckets::UpperBounds() const {
  std::vector<double> bounds(size());
  for (size_t i = 0; i < bounds.size(); ++i) bounds[i] = UpperBound(i);
  return bounds;
}

double PercentileOfBuckets(std::span<const uint64_t> counts, std::span<const double> upper_bounds,
                           double q, BucketPercentile how) {
  uint64_t total = 0;
  for (uint64_t n : counts) total += n;
  if (total == 0) return 0;
  q = q > 0 ? (q < 1 ? q : 1) : 0;  // NaN counts as 0
  if (how == BucketPercentile::kUpperEdge) {
    const uint64_t rank = uint64_t(q * double(total - 1)) + 1;
    uint64_t seen = 0;
    for (size_t b = 0; b < counts.size(); ++b) {
      seen += counts[b];
      if (seen >= rank) return upper_bounds[b];
    }
  } else {
    const double rank = q * double(total);
    uint64_t below = 0;
    for (size_t b = 0; b < counts.size(); ++b) {
      if (counts[b] == 0) continue;
      if (double(below + counts[b]) >= rank) {
        const double lower = b == 0 ? 0 : upper_bounds[b - 1];
        const double upper = upper_bounds[b];
        if (std::isinf(upper)) return lower;
        return lower + (upper - lower) * (rank - double(below)) / double(counts[b]);
      }
      below += counts[b];
    }
  }
  return 0;  // not reached: the rank is at most the total counted
}

}  // namespace bx
