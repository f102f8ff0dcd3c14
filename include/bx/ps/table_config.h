// Table configuration of the parameter server: what a table holds (embedding rows keyed by
// 64-bit ids, or a dense block of rows 0..rows-1), how a row starts (initialiser) and how a
// pushed gradient changes it (optimiser). Plain values: thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "bx/export.h"

namespace bx::ps {

enum class TableKind : uint8_t {
  kEmbedding = 1,  // any 64-bit key; a row is created on its first push
  kDense = 2,      // keys 0..dense_rows-1 only; other keys are InvalidArgument
};

enum class InitializerKind : uint8_t {
  kZeros = 1,
  kConstant = 2,  // every element = value
  kUniform = 3,   // uniform in [low, high)
  kNormal = 4,    // normal(mean, stddev)
};

// Random initialisers are a pure function of (seed, key, element index), so every replica of a
// shard, and a replica that restarts, produces the same row without talking to anyone.
struct BX_EXPORT InitializerConfig {
  InitializerKind kind = InitializerKind::kZeros;
  float value = 0.0f;
  float low = -0.01f;
  float high = 0.01f;
  float mean = 0.0f;
  float stddev = 0.01f;
  uint64_t seed = 0;
};

enum class OptimizerKind : uint8_t {
  kSgd = 1,      // w -= learning_rate * g
  kAdagrad = 2,  // a += g*g; w -= learning_rate * g / (sqrt(a) + epsilon)
};

struct BX_EXPORT OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float learning_rate = 0.01f;
  float initial_accumulator = 0.1f;  // Adagrad: a of a new row
  float epsilon = 1e-8f;             // Adagrad
};

struct BX_EXPORT TableConfig {
  uint32_t id = 0;
  std::string name;
  TableKind kind = TableKind::kEmbedding;
  uint32_t dim = 0;         // floats per row, 1..kMaxDim
  uint64_t dense_rows = 0;  // kDense only
  InitializerConfig init;
  OptimizerConfig optimizer;
  // Bounds of an embedding table on each replica (0: unbounded, the default). A push that takes
  // the table over either evicts its least recently pushed rows (docs/PS.md "Bounded tables");
  // a fetch of an evicted row returns its initial value again. max_bytes counts rows as
  // bx_ps_table_bytes does (key, weights, optimiser state), so it must hold at least one row.
  uint64_t max_rows = 0;
  uint64_t max_bytes = 0;
  // An embedding table's row not pushed for this long is evicted (0: never). Time is the
  // primary's clock as stamped on the replicated push stream, never a replica's own, so every
  // replica expires the same rows (docs/PS.md "Expiry and admission").
  uint64_t ttl_seconds = 0;
  // An id of an embedding table gets a row only at its admit_after_pushes-th push; earlier
  // pushes are counted (in a bounded sketch) and dropped (0 or 1: every push is applied).
  uint32_t admit_after_pushes = 0;
};

// Bounds that keep every size computation far from overflow.
inline constexpr uint32_t kMaxDim = 1u << 16;
inline constexpr uint64_t kMaxDenseRows = 1ull << 32;
// A bounded table holds at most this many rows per replica: its recency list links rows by
// 32-bit numbers (docs/PS.md "Bounded tables", overhead).
inline constexpr uint64_t kMaxBoundedRows = 1ull << 25;
// Ten years: a stamp plus a ttl stays far from overflowing 64-bit milliseconds.
inline constexpr uint64_t kMaxTtlSeconds = 10ull * 366 * 24 * 3600;
// Admission counters are 16 bits wide and halve periodically (src/ps/admission_sketch.h).
inline constexpr uint32_t kMaxAdmitAfterPushes = 1000;

}  // namespace bx::ps
