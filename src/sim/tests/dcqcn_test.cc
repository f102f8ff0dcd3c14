// DCQCN (Mellanox variant) against the formulas, evaluated lazily: the rate at any instant must be
// what the periodic timers would have produced.
#include "sim/dcqcn.h"

#include <gtest/gtest.h>

#include <cmath>

namespace bx::sim {
namespace {

constexpr double kLine = 25000;  // Mb/s

TEST(Dcqcn, NoCnpKeepsLineRate) {
  DcqcnConfig config;
  DcqcnRate rate(&config, kLine);
  EXPECT_EQ(rate.RateAt(0), kLine);
  EXPECT_EQ(rate.RateAt(10 * kMillisecond), kLine);
  EXPECT_EQ(rate.cuts(), 0u);
}

TEST(Dcqcn, FirstCnpCutsAtNextCheckThenRecovers) {
  DcqcnConfig config;
  DcqcnRate rate(&config, kLine);
  double g = config.g;
  rate.OnCnp(0);
  // The cut waits for the decrease check at 4 us + 1 ns.
  EXPECT_EQ(rate.RateAt(4000), kLine);
  // alpha starts at 1 and decays at the alpha ticks at 1, 2, 3, 4 us (no CNP since).
  double alpha = std::pow(1 - g, 4);
  double cut = kLine * (1 - alpha / 2);
  EXPECT_NEAR(rate.RateAt(4001), cut, 1e-6);
  EXPECT_NEAR(rate.alpha(), alpha, 1e-12);
  EXPECT_EQ(rate.cuts(), 1u);
  EXPECT_EQ(rate.target_mbps(), kLine);  // stage 0: the target is not clamped
  // Fast recovery 300 us after the cut: halfway back to the target.
  double recovered = (cut + kLine) / 2;
  EXPECT_NEAR(rate.RateAt(4001 + 300 * kMicrosecond - 1), cut, 1e-6);
  EXPECT_NEAR(rate.RateAt(4001 + 300 * kMicrosecond), recovered, 1e-6);
  // Stage F = 1: active increase; the target is capped at line rate, so halfway again.
  EXPECT_NEAR(rate.RateAt(4001 + 600 * kMicrosecond), (recovered + kLine) / 2, 1e-6);
}

TEST(Dcqcn, SecondCnpUsesUpdatedAlpha) {
  DcqcnConfig config;
  DcqcnRate rate(&config, kLine);
  double g = config.g;
  rate.OnCnp(0);
  double cut1 = kLine * (1 - std::pow(1 - g, 4) / 2);
  ASSERT_NEAR(rate.RateAt(5000), cut1, 1e-6);
  rate.OnCnp(10000);
  // Alpha at 10 us: ten decays. The CNP counts at the next alpha tick (11 us), then 12 us decays;
  // the decrease check at 12 us + 1 ns uses that alpha.
  double alpha = ((1 - g) * std::pow(1 - g, 10) + g) * (1 - g);
  EXPECT_NEAR(rate.RateAt(12000), cut1, 1e-6);
  EXPECT_NEAR(rate.RateAt(12001), cut1 * (1 - alpha / 2), 1e-6);
  EXPECT_EQ(rate.cuts(), 2u);
}

TEST(Dcqcn, NeverBelowMinimumRate) {
  DcqcnConfig config;
  DcqcnRate rate(&config, kLine);
  for (TimeNs t = 0; t < 2 * kMillisecond; t += 5 * kMicrosecond) rate.OnCnp(t);
  EXPECT_GE(rate.RateAt(2 * kMillisecond), config.min_rate_mbps);
  EXPECT_NEAR(rate.RateAt(2 * kMillisecond), config.min_rate_mbps, 1e-6);
}

TEST(Dcqcn, RecoversToLineRateWithoutCnps) {
  DcqcnConfig config;
  DcqcnRate rate(&config, kLine);
  rate.OnCnp(0);
  EXPECT_LT(rate.RateAt(10 * kMicrosecond), kLine);
  // Hyper increase adds 50 Mb/s to the target per 300 us: back to line rate well within 1 s.
  EXPECT_EQ(rate.RateAt(1 * kSecond), kLine);
}

}  // namespace
}  // namespace bx::sim
