#include "ps/workload.h"

#include <algorithm>

#include <fmt/format.h>

namespace bx::ps {
namespace {

// z such that Phi(z) = 0.99 for the standard normal.
constexpr double kZ99 = 2.3263478740408408;

}  // namespace

// With ln X ~ N(mu, s^2):
//   mean = exp(mu + s^2/2)          =>  ln(mean) = mu + s^2/2
//   P99  = exp(mu + z s), z = 2.3263 =>  ln(P99)  = mu + z s
// Subtracting: s^2/2 - z s + ln(P99/mean) = 0, so s = z -/+ sqrt(z^2 - 2 ln(P99/mean)).
// Both roots match the two numbers; the smaller one is the distribution whose bulk sits near
// the mean (the larger one puts the median far below the mean and has an enormous tail), so
// it is the one taken. A real root needs ln(P99/mean) <= z^2/2, i.e. P99/mean <= e^2.706
// (about 14.97). Then mu = ln(mean) - s^2/2.
// Defaults: mean 20480, P99 51200: ln(2.5) = 0.91629, s = 2.32635 - sqrt(5.41190 - 1.83258)
// = 0.43445, mu = ln(20480) - 0.09437 = 9.83283.
Result<LogNormalParams> LogNormalFromMeanP99(double mean, double p99) {
  if (!(mean > 0) || !(p99 > mean)) {
    return InvalidArgument(fmt::format("lognormal: need 0 < mean < p99, got {} and {}", mean, p99));
  }
  const double gap = std::log(p99 / mean);
  const double discriminant = kZ99 * kZ99 - 2 * gap;
  if (discriminant < 0) {
    return InvalidArgument(fmt::format(
        "lognormal: P99/mean = {:.3f} is above {:.3f}; no lognormal has that mean and P99",
        p99 / mean, std::exp(kZ99 * kZ99 / 2)));
  }
  LogNormalParams p;
  p.sigma = kZ99 - std::sqrt(discriminant);
  p.mu = std::log(mean) - p.sigma * p.sigma / 2;
  return p;
}

Result<LogNormalSizes> LogNormalSizes::Create(double mean, double p99, uint64_t min_bytes,
                                              uint64_t max_bytes) {
  BX_ASSIGN_OR_RETURN(LogNormalParams params, LogNormalFromMeanP99(mean, p99));
  if (min_bytes == 0 || min_bytes > max_bytes) {
    return InvalidArgument("lognormal sizes: need 0 < min_bytes <= max_bytes");
  }
  return LogNormalSizes(params, mean, p99, min_bytes, max_bytes);
}

uint64_t LogNormalSizes::Sample(Rng& rng) const {
  double x = std::exp(params_.mu + params_.sigma * rng.Normal());
  x = std::clamp(x, static_cast<double>(min_), static_cast<double>(max_));
  return static_cast<uint64_t>(std::llround(x));
}

std::string LogNormalSizes::Describe() const {
  return fmt::format("lognormal(mean {:.0f} B, P99 {:.0f} B; mu {:.4f}, sigma {:.4f})", mean_, p99_,
                     params_.mu, params_.sigma);
}

Result<LogUniformSizes> LogUniformSizes::Create(uint64_t min_bytes, uint64_t max_bytes) {
  if (min_bytes == 0 || min_bytes > max_bytes) {
    return InvalidArgument("log-uniform sizes: need 0 < min_bytes <= max_bytes");
  }
  return LogUniformSizes(min_bytes, max_bytes);
}

uint64_t LogUniformSizes::Sample(Rng& rng) const {
  const double lo = std::log(static_cast<double>(min_));
  const double hi = std::log(static_cast<double>(max_));
  double x = std::exp(lo + (hi - lo) * rng.Uniform());
  return std::clamp<uint64_t>(static_cast<uint64_t>(std::llround(x)), min_, max_);
}

std::string LogUniformSizes::Describe() const {
  return fmt::format("log-uniform({} B .. {} B)", min_, max_);
}

ZipfKeys::ZipfKeys(uint64_t key_space, double exponent)
    : key_space_(key_space > 0 ? key_space : 1),
      exponent_(exponent > 0 ? exponent : 0.99),
      one_minus_s_(1.0 - exponent_) {
  const double n1 = static_cast<double>(key_space_) + 1.0;
  top_ = std::abs(one_minus_s_) < 1e-9 ? std::log(n1) : std::pow(n1, one_minus_s_);
}

// Density proportional to x^-s on [1, N+1): CDF F(x) = (x^(1-s) - 1) / ((N+1)^(1-s) - 1), so
// x = (1 + u ((N+1)^(1-s) - 1))^(1/(1-s)); for s = 1, F(x) = ln x / ln(N+1), x = (N+1)^u.
uint64_t ZipfKeys::NextRank(Rng& rng) const {
  const double u = rng.Uniform();
  double x = std::abs(one_minus_s_) < 1e-9 ? std::exp(u * top_)
                                           : std::pow(1.0 + u * (top_ - 1.0), 1.0 / one_minus_s_);
  uint64_t rank = static_cast<uint64_t>(x);  // floor: 1..N
  return std::clamp<uint64_t>(rank, 1, key_space_) - 1;
}

uint64_t ZipfKeys::Next(Rng& rng) const {
  return Mix64(NextRank(rng));
}

}  // namespace bx::ps
