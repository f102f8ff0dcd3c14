// One parameter table of one shard: rows of `dim` floats keyed by 64-bit ids.
//
// Rows live in kStripes stripes chosen by a hash of the key; each stripe has a reader-writer
// lock, a key -> row index map and one float array. A row is created (initialised, plus the
// optimiser's state) on its first push; fetching a row that was never pushed returns its
// initial values without storing it, so reads never grow the table.
//
// Thread-safety: every method may be called from any number of threads at once. A push
// applies each key's gradient under that key's stripe lock, so it is atomic per key (never a
// torn row), but a push of several keys is not atomic as a whole: a concurrent fetch may see
// some of its keys updated and others not. Callers that need one order of pushes (replicas)
// serialise pushes themselves (ShardReplica).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "bx/ps/table_config.h"
#include "bx/status.h"

namespace bx::ps {

class Table {
 public:
  // Validates the config (dim, dense rows, initialiser and optimiser parameters).
  static Result<std::unique_ptr<Table>> Create(const TableConfig& config);
  static Status ValidateConfig(const TableConfig& config);

  const TableConfig& config() const { return config_; }
  uint32_t dim() const { return config_.dim; }
  // Floats stored per row (weights, then optimiser state).
  uint32_t stride() const { return stride_; }

  // Checks that every key is valid for this table (dense tables: key < dense_rows).
  Status ValidateKeys(std::span<const uint64_t> keys) const;

  // Writes the weights of keys[i] to out[i*dim*4 ...] (little-endian floats; `out` may be
  // unaligned, e.g. inside a fetch response buffer). out.size() == keys.size() * dim * 4.
  Status Fetch(std::span<const uint64_t> keys, std::span<std::byte> out) const;
  Status Fetch(std::span<const uint64_t> keys, std::span<float> out) const;

  // Applies gradients[i*dim, (i+1)*dim) to keys[i], in order. Validates everything first, and
  // refuses (InvalidArgument) a push whose update would leave any value or optimiser state
  // non-finite: on error nothing is applied. Concurrent pushes are atomic with each other; a
  // concurrent fetch sees each row whole, before or after.
  Status Push(std::span<const uint64_t> keys, std::span<const float> gradients);

  // Rows stored (pushed at least once).
  size_t row_count() const;
  // The bytes `rows` rows take as stored and snapshotted: each a key and stride() floats.
  uint64_t RowBytes(uint64_t rows) const {
    return rows * (sizeof(uint64_t) + uint64_t{stride_} * sizeof(float));
  }

  // Calls fn(key, state) for every stored row (state = stride() floats). Each stripe is read
  // under its lock; rows pushed concurrently may or may not be visited.
  void ForEachRow(const std::function<void(uint64_t, std::span<const float>)>& fn) const;
  // Stores a row's full state (used when loading a snapshot). Errors if the key exists.
  Status InsertRow(uint64_t key, std::span<const float> state);
  // Replaces every row with `source`'s (same id and shape), leaving `source` empty: stripe by
  // stripe, so a concurrent fetch sees each row whole, old or new.
  Status TakeRows(Table& source);
  // A copy of this table, stripe by stripe under the stripes' read locks (memcpy speed): a
  // replica copies its tables while pushes wait, and encodes the copy after they resume.
  Result<std::unique_ptr<Table>> Copy() const;

 private:
  // 64 stripes: enough that 2 to 32 handler threads rarely meet on one lock, few enough that
  // an empty table stays small.
  static constexpr size_t kStripes = 64;

  struct Stripe {
    mutable std::shared_mutex mu;
    std::unordered_map<uint64_t, size_t> index;  // key -> row number in `rows`
    std::vector<float> rows;                     // row r at [r*stride, (r+1)*stride)
  };

  explicit Table(const TableConfig& config);
  static size_t StripeIndex(uint64_t key);
  Stripe& StripeOf(uint64_t key);
  const Stripe& StripeOf(uint64_t key) const;
  // Copies `key`'s stored state (stride floats) into `out`, its stripe held by the caller; false
  // when it has none.
  bool ReadRowLocked(uint64_t key, std::span<float> out) const;
  // A new row's state (weights from the initialiser, then the optimiser's) into `row`.
  void InitializeStoredRow(uint64_t key, std::span<float> row) const;
  // `key`'s state as a push starts from it: stored, or a new row's.
  void LoadRowLocked(uint64_t key, std::span<float> out) const;

  const TableConfig config_;
  const uint32_t stride_;
  std::array<Stripe, kStripes> stripes_;
};

}  // namespace bx::ps
