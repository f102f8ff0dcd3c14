// Workload generators for rankers (inference) and trainers (training): message sizes, key
// counts and keys, all from a seeded generator so that a run can be repeated exactly.
//
// Everything here is a plain value or a pure function of its Rng: thread-compatible; give each
// thread its own Rng (e.g. seeded with seed + thread index).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "bx/ps/cluster.h"  // Mix64
#include "bx/status.h"

namespace bx::ps {

// SplitMix64: a tiny, fast generator whose output is the same on every platform (unlike the
// standard distributions, whose algorithms are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix64(state_ += 0x9e3779b97f4a7c15ull); }
  // Uniform in [0, 1), 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller; one output per call keeps the code simple).
  double Normal() {
    double u1 = 1.0 - Uniform();  // (0, 1]: finite log
    double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  // Uniform in [0, n), n > 0 (multiply-shift; the bias is below 2^-64 * n).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * 1024;

// ln(size) ~ Normal(mu, sigma^2).
struct LogNormalParams {
  double mu = 0;
  double sigma = 0;
};

// The lognormal with the given mean and 99th percentile (see workload.cc for the derivation).
// InvalidArgument unless 0 < mean < p99 and p99/mean is small enough for a solution to exist.
Result<LogNormalParams> LogNormalFromMeanP99(double mean, double p99);

// Message sizes in bytes.
class SizeDistribution {
 public:
  virtual ~SizeDistribution() = default;
  virtual uint64_t Sample(Rng& rng) const = 0;
  virtual std::string Describe() const = 0;
};

// Training default: lognormal with mean 20 KiB and P99 50 KiB (paper section 2.1), clamped to
// [min_bytes, max_bytes] (clamping changes the mean by far less than 0.1% at the defaults).
class LogNormalSizes : public SizeDistribution {
 public:
  static Result<LogNormalSizes> Create(double mean = 20.0 * kKiB, double p99 = 50.0 * kKiB,
                                       uint64_t min_bytes = 64, uint64_t max_bytes = 64 * kMiB);
  uint64_t Sample(Rng& rng) const override;
  std::string Describe() const override;
  const LogNormalParams& params() const { return params_; }

 private:
  LogNormalSizes(LogNormalParams params, double mean, double p99, uint64_t min, uint64_t max)
      : params_(params), mean_(mean), p99_(p99), min_(min), max_(max) {}
  LogNormalParams params_;
  double mean_, p99_;
  uint64_t min_, max_;
};

// Inference default: log-uniform between 1 KiB and 2 MiB, so every octave from kilobytes to
// megabytes is equally likely.
class LogUniformSizes : public SizeDistribution {
 public:
  static Result<LogUniformSizes> Create(uint64_t min_bytes = kKiB, uint64_t max_bytes = 2 * kMiB);
  uint64_t Sample(Rng& rng) const override;
  std::string Describe() const override;

 private:
  LogUniformSizes(uint64_t min, uint64_t max) : min_(min), max_(max) {}
  uint64_t min_, max_;
};

// Keys a push of about `bytes` carries for rows of `dim` floats: each key costs 8 bytes of id
// and 4*dim bytes of gradient. At least 1.
inline uint64_t KeysForBytes(uint64_t bytes, uint32_t dim) {
  uint64_t per_key = 8 + 4 * uint64_t{dim};
  return bytes / per_key > 0 ? bytes / per_key : 1;
}

// Keys drawn from [0, key_space) (then scrambled, see below).
class KeyGenerator {
 public:
  virtual ~KeyGenerator() = default;
  virtual uint64_t Next(Rng& rng) const = 0;
};

// Every key equally likely. Keys are rank 0..key_space-1 mapped through Mix64 (a bijection),
// so they are distinct 64-bit ids spread over all shards.
class UniformKeys : public KeyGenerator {
 public:
  explicit UniformKeys(uint64_t key_space) : key_space_(key_space > 0 ? key_space : 1) {}
  uint64_t Next(Rng& rng) const override { return Mix64(rng.Below(key_space_)); }

 private:
  uint64_t key_space_;
};

// Zipf-like popularity: rank r (1-based) has probability about proportional to r^-exponent,
// sampled by inverting the continuous power-law CDF on [1, key_space + 1) (exact for the
// continuous law, within a few percent of discrete Zipf for the head ranks). Rank r becomes
// key Mix64(r - 1), so hot keys are spread over shards rather than all in one.
class ZipfKeys : public KeyGenerator {
 public:
  ZipfKeys(uint64_t key_space, double exponent = 0.99);
  uint64_t Next(Rng& rng) const override;
  // The 0-based rank of the next draw (for tests); Next() == Mix64(NextRank()).
  uint64_t NextRank(Rng& rng) const;

 private:
  uint64_t key_space_;
  double exponent_;
  double one_minus_s_;
  double top_;  // (key_space + 1)^(1 - s), or ln(key_space + 1) when s == 1
};

}  // namespace bx::ps
