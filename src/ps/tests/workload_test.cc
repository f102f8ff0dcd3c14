// Workload generators, checked statistically with fixed seeds (deterministic).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "ps/workload.h"

namespace bx::ps {
namespace {

TEST(LogNormal, ParametersFromMeanAndP99) {
  Result<LogNormalParams> p = LogNormalFromMeanP99(20.0 * kKiB, 50.0 * kKiB);
  ASSERT_TRUE(p.ok());
  // The closed forms the parameters must satisfy.
  EXPECT_NEAR(std::exp(p->mu + p->sigma * p->sigma / 2), 20480.0, 1e-6);
  EXPECT_NEAR(std::exp(p->mu + 2.3263478740408408 * p->sigma), 51200.0, 1e-6);
  EXPECT_NEAR(p->sigma, 0.43445, 1e-4);
  EXPECT_NEAR(p->mu, 9.83283, 1e-4);

  EXPECT_FALSE(LogNormalFromMeanP99(100, 50).ok());
  EXPECT_FALSE(LogNormalFromMeanP99(0, 50).ok());
  EXPECT_FALSE(LogNormalFromMeanP99(1, 20).ok()) << "P99/mean above e^(z^2/2)";
}

TEST(LogNormal, SamplesHaveTheRequestedMeanAndP99) {
  auto sizes = LogNormalSizes::Create();
  ASSERT_TRUE(sizes.ok());
  Rng rng(42);
  constexpr int kSamples = 200000;
  std::vector<uint64_t> v(kSamples);
  double sum = 0;
  for (auto& x : v) sum += static_cast<double>(x = sizes->Sample(rng));
  std::sort(v.begin(), v.end());
  // Standard error of the mean is ~20 B here; of the P99 a few hundred bytes.
  EXPECT_NEAR(sum / kSamples, 20480.0, 20480.0 * 0.01);
  EXPECT_NEAR(static_cast<double>(v[kSamples * 99 / 100]), 51200.0, 51200.0 * 0.02);
  EXPECT_NE(sizes->Describe().find("lognormal"), std::string::npos);
}

TEST(LogUniform, SpansKilobytesToMegabytes) {
  auto sizes = LogUniformSizes::Create();
  ASSERT_TRUE(sizes.ok());
  Rng rng(7);
  constexpr int kSamples = 100000;
  std::vector<uint64_t> v(kSamples);
  for (auto& x : v) x = sizes->Sample(rng);
  std::sort(v.begin(), v.end());
  EXPECT_GE(v.front(), kKiB);
  EXPECT_LE(v.back(), 2 * kMiB);
  // Median of log-uniform(a, b) is sqrt(a b) = 45.25 KiB.
  EXPECT_NEAR(static_cast<double>(v[kSamples / 2]), std::sqrt(1024.0 * 2 * kMiB), 2000);
  // Each of the 11 octaves holds about 1/11 of the samples.
  const auto below = [&](uint64_t x) {
    return std::lower_bound(v.begin(), v.end(), x) - v.begin();
  };
  EXPECT_NEAR(below(2 * kKiB) / double{kSamples}, 1.0 / 11, 0.01);
  EXPECT_NEAR((kSamples - below(kMiB)) / double{kSamples}, 1.0 / 11, 0.01);
  EXPECT_FALSE(LogUniformSizes::Create(10, 5).ok());
}

TEST(Workload, SameSeedSameSequence) {
  auto sizes = LogNormalSizes::Create();
  Rng a(5), b(5), c(6);
  ZipfKeys keys(1000000);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(sizes->Sample(a), sizes->Sample(b));
    EXPECT_EQ(keys.Next(a), keys.Next(b));
  }
  EXPECT_NE(Rng(5).Next(), c.Next());
}

TEST(Workload, KeysForBytes) {
  EXPECT_EQ(KeysForBytes(20480, 16), 20480u / 72);
  EXPECT_EQ(KeysForBytes(1, 16), 1u);
}

TEST(ZipfKeys, HeadIsHotAndRanksFollowThePowerLaw) {
  ZipfKeys zipf(1000000, 1.0);
  Rng rng(11);
  constexpr int kSamples = 200000;
  std::map<uint64_t, int> count;
  for (int i = 0; i < kSamples; ++i) {
    uint64_t r = zipf.NextRank(rng);
    ASSERT_LT(r, 1000000u);
    ++count[r];
  }
  // Continuous law with s = 1: P(rank 0) = ln 2 / ln(N+1) = 0.0502; P(rank 1) = ln 1.5 / ln(N+1).
  EXPECT_NEAR(count[0] / double{kSamples}, std::log(2.0) / std::log(1e6 + 1), 0.003);
  EXPECT_NEAR(count[1] / double{kSamples}, std::log(1.5) / std::log(1e6 + 1), 0.003);
  EXPECT_GT(count[0], count[9] * 5);

  UniformKeys uniform(100);
  std::map<uint64_t, int> seen;
  for (int i = 0; i < 10000; ++i) ++seen[uniform.Next(rng)];
  EXPECT_EQ(seen.size(), 100u);
  for (auto& [key, n] : seen) EXPECT_NEAR(n, 100, 45);
}

}  // namespace
}  // namespace bx::ps
