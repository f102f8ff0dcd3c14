// Deterministic random numbers for the simulation: splitmix64 seeding a xoshiro256** generator,
// so results depend only on the seed, never on the platform's std:: distributions.
#pragma once

#include <cmath>
#include <cstdint>

namespace bx::sim {

class Random {
 public:
  explicit Random(uint64_t seed) {
    for (uint64_t& word : state_) word = SplitMix(seed);
  }
  // Stream `index` of a family of independent streams under one seed: one per host or switch, so
  // that no node's draws depend on another's.
  static Random Stream(uint64_t seed, uint64_t index) {
    return Random(seed + index * 0x9e37'79b9'7f4a'7c15ull);
  }

  uint64_t Next() {
    uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1).
  double Uniform() { return double(Next() >> 11) * 0x1.0p-53; }

  // Standard normal by Box-Muller (one of the pair; simplicity over speed, sizes are rare).
  double Normal() {
    double u1 = Uniform();
    double u2 = Uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_[4];
};

// Lognormal message sizes given the mean and the 99th percentile (the paper gives those two).
// mean = exp(mu + s^2/2), p99 = exp(mu + z99 s), so p99/mean = exp(z99 s - s^2/2): the smaller
// root of s^2/2 - z99 s + ln(p99/mean) = 0.
class LognormalSize {
 public:
  LognormalSize(double mean, double p99) {
    constexpr double kZ99 = 2.326347874;
    double ratio = std::log(p99 / mean);
    sigma_ = kZ99 - std::sqrt(kZ99 * kZ99 - 2 * ratio);
    mu_ = std::log(mean) - sigma_ * sigma_ / 2;
  }
  uint32_t Sample(Random& rng) const {
    double v = std::exp(mu_ + sigma_ * rng.Normal());
    return v < 1 ? 1 : uint32_t(v);
  }
  double mu() const { return mu_; }
  double sigma() const { return sigma_; }

 private:
  double mu_;
  double sigma_;
};

}  // namespace bx::sim
