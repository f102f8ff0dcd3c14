// Log-linear histogram buckets and the percentiles read from them.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "bx/metrics.h"

namespace bx::metrics {
namespace {

TEST(HistogramTest, EmptyHasNoPercentiles) {
  Histogram h;
  auto s = h.Snapshot();
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.Percentile(0.5), 0);
}

TEST(HistogramTest, BucketsAreLogLinear) {
  HistogramOptions o;
  o.min = 1;
  o.max = 1000;
  o.sub_buckets = 4;
  Histogram h(o);
  auto s = h.Snapshot();
  // From the octave of 1, [1, 2), to the octave of 1000, [512, 1024): 10 octaves of 4, plus
  // the underflow and overflow buckets.
  ASSERT_EQ(s.upper_bounds.size(), 1 + 10 * 4 + 1u);
  EXPECT_EQ(s.upper_bounds[0], 1.0);
  EXPECT_EQ(s.upper_bounds[1], 1.25);
  EXPECT_EQ(s.upper_bounds[4], 2.0);
  EXPECT_EQ(s.upper_bounds[5], 2.5);
  EXPECT_TRUE(std::isinf(s.upper_bounds.back()));
  for (size_t b = 2; b + 1 < s.upper_bounds.size(); ++b) {
    double width = s.upper_bounds[b] - s.upper_bounds[b - 1];
    EXPECT_LE(width / s.upper_bounds[b - 1], 0.25 + 1e-12) << "bucket " << b;
  }
}

TEST(HistogramTest, ValuesLandInTheBucketThatBoundsThem) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> exponent(-7, 2);
  for (int i = 0; i < 10000; ++i) {
    double v = std::pow(10.0, exponent(rng));
    Histogram one;
    one.Observe(v);
    auto s = one.Snapshot();
    size_t b = 0;
    while (s.counts[b] == 0) ++b;
    EXPECT_LT(v, s.upper_bounds[b]);
    if (b > 0) {
      EXPECT_GE(v, s.upper_bounds[b - 1]);
    }
  }
}

TEST(HistogramTest, OutOfRangeValuesAreKept) {
  Histogram h;
  h.Observe(0);
  h.Observe(-3);
  h.Observe(1e9);
  h.Observe(NAN);  // ignored
  auto s = h.Snapshot();
  EXPECT_EQ(s.count, 3u);
  EXPECT_EQ(s.counts.front(), 2u);
  EXPECT_EQ(s.counts.back(), 1u);
  EXPECT_DOUBLE_EQ(s.sum, 1e9 - 3);
}

TEST(HistogramTest, PercentilesAreWithinABucketWidth) {
  Histogram h;  // latencies in seconds, 8 sub-buckets: 12.5% wide at most
  std::mt19937_64 rng(2);
  std::lognormal_distribution<double> latency(std::log(20e-6), 0.8);  // ~20 us median
  std::vector<double> values;
  for (int i = 0; i < 200000; ++i) {
    values.push_back(latency(rng));
    h.Observe(values.back());
  }
  std::sort(values.begin(), values.end());
  auto s = h.Snapshot();
  EXPECT_EQ(s.count, values.size());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    double exact = values[size_t(q * double(values.size() - 1))];
    EXPECT_NEAR(s.Percentile(q), exact, exact * 0.125) << "q=" << q;
  }
  EXPECT_LE(s.Percentile(0), s.Percentile(0.5));
  EXPECT_LE(s.Percentile(0.999), s.Percentile(1));
}

TEST(HistogramTest, ObservesFromManyThreads) {
  Histogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&h] {
      for (int i = 0; i < 50000; ++i) h.Observe(1e-3);
    });
  for (auto& t : threads) t.join();
  auto s = h.Snapshot();
  EXPECT_EQ(s.count, 200000u);
  EXPECT_NEAR(s.sum, 200.0, 1e-6);
}

}  // namespace
}  // namespace bx::metrics
