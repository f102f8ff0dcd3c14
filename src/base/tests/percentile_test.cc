// The nearest-rank percentile of samples.
#include "base/percentile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace bx {
namespace {

TEST(PercentileTest, NearestRank) {
  std::vector<int> ten = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
  EXPECT_EQ(Percentile(ten, 0), 1);
  EXPECT_EQ(Percentile(ten, 0.1), 1);   // rank 1
  EXPECT_EQ(Percentile(ten, 0.11), 2);  // rank ceil(1.1) = 2
  EXPECT_EQ(Percentile(ten, 0.5), 5);   // rank 5: half the samples are at or below it
  EXPECT_EQ(Percentile(ten, 0.51), 6);
  EXPECT_EQ(Percentile(ten, 0.99), 10);
  EXPECT_EQ(Percentile(ten, 1), 10);
  EXPECT_EQ(Percentile(ten, 2), 10);
  EXPECT_EQ(Percentile(ten, -1), 1);
  EXPECT_EQ(Percentile(ten, NAN), 1);
}

TEST(PercentileTest, EmptyAndSingle) {
  std::vector<double> none;
  EXPECT_EQ(Percentile(none, 0.5), 0.0);
  std::vector<double> one = {4.5};
  EXPECT_EQ(Percentile(one, 0), 4.5);
  EXPECT_EQ(Percentile(one, 0.99), 4.5);
}

TEST(PercentileTest, RoundingDoesNotMoveTheRank) {
  // 0.07 * 100 is 7.000000000000001 in floating point; the rank is still 7.
  EXPECT_EQ(PercentileIndex(100, 0.07), 6u);
  EXPECT_EQ(PercentileIndex(1000, 0.99), 989u);
  EXPECT_EQ(PercentileIndex(1000, 0.999), 998u);
  EXPECT_EQ(PercentileIndex(3, 0.5), 1u);
  EXPECT_EQ(PercentileIndex(4, 0.5), 1u);
}

TEST(PercentileTest, OrderOfTheSamplesDoesNotMatter) {
  std::mt19937_64 rng(5);
  std::vector<uint64_t> samples(10001);
  for (uint64_t& s : samples) s = rng() % 100000;
  std::vector<uint64_t> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  for (double q : {0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    const uint64_t expected = sorted[PercentileIndex(sorted.size(), q)];
    EXPECT_EQ(Percentile(samples, q), expected) << q;  // asked in turn of one reordered vector
    EXPECT_EQ(Percentile(sorted, q), expected) << q;
    // At least a fraction q of the samples are at or below it, and fewer are strictly below.
    const auto at_or_below = std::upper_bound(sorted.begin(), sorted.end(), expected);
    const auto below = std::lower_bound(sorted.begin(), sorted.end(), expected);
    EXPECT_GE(double(at_or_below - sorted.begin()), q * double(sorted.size()) - 1e-9) << q;
    EXPECT_LT(double(below - sorted.begin()), std::max(q * double(sorted.size()), 1.0)) << q;
  }
}

}  // namespace
}  // namespace bx
