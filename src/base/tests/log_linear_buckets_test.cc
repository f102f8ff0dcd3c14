// The log-linear bucket scheme and the percentiles read from bucket counts.
#include "base/log_linear_buckets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace bx {
namespace {

TEST(LogLinearBucketsTest, IndexesFollowTheOctaves) {
  // Octaves [1, 2), [2, 4), [4, 8) of 4 sub-buckets each, then overflow.
  const LogLinearBuckets buckets(/*min_exponent=*/0, /*octaves=*/3, /*sub_buckets=*/4);
  EXPECT_EQ(buckets.size(), 3 * 4 + 2u);
  EXPECT_EQ(buckets.IndexOf(0), 0u);
  EXPECT_EQ(buckets.IndexOf(-1), 0u);
  EXPECT_EQ(buckets.IndexOf(NAN), 0u);
  EXPECT_EQ(buckets.IndexOf(0.999), 0u);
  EXPECT_EQ(buckets.IndexOf(1), 1u);
  EXPECT_EQ(buckets.IndexOf(1.24), 1u);
  EXPECT_EQ(buckets.IndexOf(1.25), 2u);
  EXPECT_EQ(buckets.IndexOf(2), 5u);
  EXPECT_EQ(buckets.IndexOf(7.99), 12u);
  EXPECT_EQ(buckets.IndexOf(8), 13u);
  EXPECT_EQ(buckets.IndexOf(1e300), 13u);
  EXPECT_EQ(buckets.IndexOf(INFINITY), 13u);
  EXPECT_EQ(buckets.UpperBound(0), 1.0);
  EXPECT_EQ(buckets.UpperBound(1), 1.25);
  EXPECT_EQ(buckets.UpperBound(4), 2.0);
  EXPECT_EQ(buckets.UpperBound(5), 2.5);
  EXPECT_EQ(buckets.UpperBound(12), 8.0);
  EXPECT_TRUE(std::isinf(buckets.UpperBound(13)));
}

TEST(LogLinearBucketsTest, EachValueLiesBelowItsUpperBoundAndAtOrAboveTheOneBefore) {
  const LogLinearBuckets buckets(/*min_exponent=*/-24, /*octaves=*/32, /*sub_buckets=*/8);
  const std::vector<double> bounds = buckets.UpperBounds();
  ASSERT_EQ(bounds.size(), buckets.size());
  for (double v = 1e-8; v < 1e3; v *= 1.01) {
    const size_t b = buckets.IndexOf(v);
    EXPECT_LT(v, bounds[b]) << v;
    if (b > 0) {
      EXPECT_GE(v, bounds[b - 1]) << v;
    }
    // A bucket is at most 1/8 of its lower edge wide.
    if (b > 0 && b + 1 < bounds.size()) {
      EXPECT_LE(bounds[b] / bounds[b - 1], 1.125 + 1e-12);
    }
  }
}

TEST(PercentileOfBucketsTest, EmptyIsZero) {
  const std::vector<uint64_t> counts(4, 0);
  const std::vector<double> bounds = {1, 2, 3, INFINITY};
  EXPECT_EQ(PercentileOfBuckets(counts, bounds, 0.5, BucketPercentile::kUpperEdge), 0);
  EXPECT_EQ(PercentileOfBuckets(counts, bounds, 0.5, BucketPercentile::kInterpolated), 0);
}

TEST(PercentileOfBucketsTest, UpperEdgeReportsTheBucketOfTheRank) {
  // Ten observations: 2 in [0, 1), 4 in [1, 2), 3 in [2, 4), 1 in the overflow bucket.
  const std::vector<uint64_t> counts = {2, 4, 3, 1};
  const std::vector<double> bounds = {1, 2, 4, INFINITY};
  auto at = [&](double q) {
    return PercentileOfBuckets(counts, bounds, q, BucketPercentile::kUpperEdge);
  };
  // Rank floor(q * 9) + 1 of 10.
  EXPECT_EQ(at(0), 1);             // rank 1
  EXPECT_EQ(at(0.2), 1);           // rank 2, the last of the first bucket
  EXPECT_EQ(at(0.25), 2);          // rank 3
  EXPECT_EQ(at(0.5), 2);           // rank 5
  EXPECT_EQ(at(0.7), 4);           // rank 7
  EXPECT_EQ(at(0.9), 4);           // rank 9
  EXPECT_TRUE(std::isinf(at(1)));  // rank 10, in the overflow bucket
}

TEST(PercentileOfBucketsTest, InterpolatedPlacesTheRankInsideItsBucket) {
  const std::vector<uint64_t> counts = {0, 4, 4, 2};
  const std::vector<double> bounds = {1, 2, 4, INFINITY};
  auto at = [&](double q) {
    return PercentileOfBuckets(counts, bounds, q, BucketPercentile::kInterpolated);
  };
  // Rank q * 10.
  EXPECT_DOUBLE_EQ(at(0), 1);      // the lower edge of the first bucket that holds anything
  EXPECT_DOUBLE_EQ(at(0.2), 1.5);  // rank 2: 2 of the 4 in [1, 2)
  EXPECT_DOUBLE_EQ(at(0.4), 2);
  EXPECT_DOUBLE_EQ(at(0.6), 3);  // rank 6: 2 of the 4 in [2, 4)
  EXPECT_DOUBLE_EQ(at(1), 4);    // the overflow bucket: its lower edge
}

}  // namespace
}  // namespace bx
