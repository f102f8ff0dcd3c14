#include "ps/initializer.h"

#include <cmath>

#include "bx/ps/cluster.h"  // Mix64

namespace bx::ps {
namespace {

// A counter-based generator: the stream of key k under seed s is Mix64(base + i * golden), a
// SplitMix64 stream started at a state derived from (s, k). Counter-based means element j is
// computed directly, in any order, with no state kept per row.
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t StreamBase(uint64_t seed, uint64_t key) {
  return Mix64(seed ^ Mix64(key + kGolden));
}

// Uniform in [0, 1) with 53 random bits.
double Unit(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace

void InitializeRow(const InitializerConfig& c, uint64_t key, std::span<float> row) {
  switch (c.kind) {
    case InitializerKind::kZeros:
      for (float& v : row) v = 0.0f;
      return;
    case InitializerKind::kConstant:
      for (float& v : row) v = c.value;
      return;
    case InitializerKind::kUniform: {
      const uint64_t base = StreamBase(c.seed, key);
      for (size_t j = 0; j < row.size(); ++j) {
        double u = Unit(Mix64(base + (j + 1) * kGolden));
        row[j] = static_cast<float>(c.low + (static_cast<double>(c.high) - c.low) * u);
        // Rounding to float can land exactly on `high`; keep the interval half-open.
        if (row[j] >= c.high) row[j] = std::nextafter(c.high, c.low);
      }
      return;
    }
    case InitializerKind::kNormal: {
      // Box-Muller on two uniforms per element (the second output is discarded so that element
      // j depends on j alone). u1 is in (0, 1] so the log is finite.
      const uint64_t base = StreamBase(c.seed, key);
      for (size_t j = 0; j < row.size(); ++j) {
        double u1 = 1.0 - Unit(Mix64(base + (2 * j + 1) * kGolden));
        double u2 = Unit(Mix64(base + (2 * j + 2) * kGolden));
        double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
        row[j] = static_cast<float>(c.mean + c.stddev * z);
      }
      return;
    }
  }
  for (float& v : row) v = 0.0f;  // unknown kind: validated away at table creation
}

}  // namespace bx::ps
