// One parameter table of one shard: rows of `dim` floats keyed by 64-bit ids.
//
// Rows live in kStripes stripes chosen by a hash of the key; each stripe has a reader-writer
// lock, a key -> row index map and one float array. A row is created (initialised, plus the
// optimiser's state) on its first push; fetching a row that was never pushed returns its
// initial values without storing it, so reads never grow the table.
//
// A bounded table (TableConfig::max_rows, max_bytes) also keeps its rows on one recency list,
// least recently pushed first, in the order pushes were applied (within a push, in the order of
// each key's last occurrence). After a push it evicts from the old end until it is within its
// bound: replicas that apply the same pushes in the same order evict the same rows. A table with
// a ttl keeps the same list, each row stamped with the push clock of its last push, and a push
// stamped `now` first evicts the rows last pushed at or before now - ttl (Expire): the stamps
// come with the pushes (ShardState), so replicas expire the same rows too. Its list,
// its row count and its pushes are serialised by one table-wide order lock; fetches never take
// it (they never change the order).
//
// Thread-safety: every method may be called from any number of threads at once. A push
// applies each key's gradient under that key's stripe lock, so it is atomic per key (never a
// torn row), but a push of several keys is not atomic as a whole: a concurrent fetch may see
// some of its keys updated and others not. Callers that need one order of pushes (replicas)
// serialise pushes themselves (ShardReplica). A bounded table's pushes also wait for each other.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "bx/ps/table_config.h"
#include "bx/status.h"

namespace bx::ps {

class Table {
 public:
  // Validates the config (dim, dense rows, bounds, initialiser and optimiser parameters).
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
  // `now_ms`, for a table with a ttl: the push clock (never lower than at the last push); rows
  // it finds expired start again from their initial value, as evicted ones do.
  // `stamp` marks every row the push stores (its replica's lsn: ForEachRowChangedAfter), and the
  // keys the table evicts or expires on the way are appended to `*evicted` when given (a
  // training primary's tombstones, docs/PS.md "Serving sync").
  Status Push(std::span<const uint64_t> keys, std::span<const float> gradients, uint64_t now_ms = 0,
              uint64_t stamp = 0, std::vector<uint64_t>* evicted = nullptr);
  // A table with a ttl: evicts every row last pushed at or before now_ms - ttl (a push to
  // another table of the shard moved the clock), appending their keys to `*evicted` when
  // given. No-op for other tables.
  void Expire(uint64_t now_ms, std::vector<uint64_t>* evicted = nullptr);
  uint64_t ttl_ms() const { return ttl_ms_; }

  // Whether `key` has a stored row (pushed, and not evicted since).
  bool Contains(uint64_t key) const;
  // Rows stored (pushed at least once, and not evicted since).
  size_t row_count() const;
  // The most rows a push may leave (the tighter of max_rows and max_bytes); 0: unbounded.
  uint64_t row_limit() const { return row_limit_; }
  static uint64_t RowLimit(const TableConfig& config);
  // Rows evicted to keep within the bound, since the table was created (or as the snapshot it
  // took its rows from counted).
  uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }
  void set_evicted(uint64_t evicted) { evicted_.store(evicted, std::memory_order_relaxed); }
  // Rows a ttl evicted (not counted in evicted()).
  uint64_t expired() const { return expired_.load(std::memory_order_relaxed); }
  void set_expired(uint64_t expired) { expired_.store(expired, std::memory_order_relaxed); }
  // The bytes `rows` rows take as stored and snapshotted: each a key and stride() floats.
  uint64_t RowBytes(uint64_t rows) const {
    return rows * (sizeof(uint64_t) + uint64_t{stride_} * sizeof(float));
  }

  // A hash of every stored row's key and state (a sum over rows, so independent of their order):
  // two tables that agree hold the same rows, barring a collision. Reads the whole table.
  uint64_t Digest() const;
  // Calls fn(key, state) for every stored row (state = stride() floats). Each stripe is read
  // under its lock; rows pushed concurrently may or may not be visited. A bounded table visits
  // its rows least recently pushed first (under its order lock: fn must not push to it), so
  // inserting them in that order into another table (InsertRow) gives it the same recency.
  void ForEachRow(const std::function<void(uint64_t, std::span<const float>)>& fn) const;
  // The same with each row's push stamp (0 unless the table has a ttl), oldest first.
  void ForEachRowPushedAt(
      const std::function<void(uint64_t, uint64_t, std::span<const float>)>& fn) const;
  // Calls fn(key, state) for every stored row whose stamp is above `stamp` (changed by a push
  // stamped later), in no particular order, each stripe under its lock. A full scan.
  void ForEachRowChangedAfter(
      uint64_t stamp, const std::function<void(uint64_t, std::span<const float>)>& fn) const;
  // A serving replica applying a sync (docs/PS.md "Serving sync"): drops `dropped` (absent ones
  // are skipped), then stores keys[i]'s state whole (stride() floats each, as the most recently
  // pushed), stamped `stamp`. `all_rows`: drops every row first (a full copy). Each row is
  // written under its stripe lock (fetches see it whole); the batch as a whole is made
  // invisible until complete by the caller (ShardReplica). `pause_between_rows`: yield after
  // each row, only to widen the window the tests' non-atomic control must show.
  Status ApplySyncRows(std::span<const uint64_t> dropped, std::span<const uint64_t> keys,
                       std::span<const float> states, uint64_t stamp, bool all_rows,
                       bool pause_between_rows = false);
  // Stores a row's full state as the most recently pushed (used when loading a snapshot), last
  // pushed at `pushed_ms` (ttl tables; not below the newest row's). Errors if the key exists.
  // A bounded table beyond its bound then evicts as a push does.
  Status InsertRow(uint64_t key, std::span<const float> state, uint64_t pushed_ms = 0);
  // Replaces every row with `source`'s (same id, shape and bound), its recency and eviction
  // count too, leaving `source` empty: stripe by stripe, so a concurrent fetch sees each row
  // whole, old or new.
  Status TakeRows(Table& source);
  // A copy of this table, stripe by stripe under the stripes' read locks (memcpy speed): a
  // replica copies its tables while pushes wait, and encodes the copy after they resume.
  Result<std::unique_ptr<Table>> Copy() const;

 private:
  // 64 stripes: enough that 2 to 32 handler threads rarely meet on one lock, few enough that
  // an empty table stays small.
  static constexpr size_t kStripes = 64;

  // A bounded table's recency list links rows by id = stripe + kStripes * slot: 32 bits hold
  // 2^26 slots a stripe, which kMaxBoundedRows and a push's key count keep below.
  static constexpr uint32_t kNoRow = UINT32_MAX;
  struct Recency {
    uint64_t key;    // the slot's key (eviction finds a victim by its position on the list)
    uint32_t older;  // ids of the neighbours on the list, kNoRow at either end
    uint32_t newer;
  };

  struct Stripe {
    mutable std::shared_mutex mu;
    std::unordered_map<uint64_t, size_t> index;  // key -> row number in `rows`
    std::vector<float> rows;                     // row r at [r*stride, (r+1)*stride)
    // Bounded tables only: row r's key and list links, guarded by order_mu_ (not by mu: fetches
    // never read it). Rows stay dense: an evicted row's slot takes the stripe's last row.
    std::vector<Recency> recency;
    // Tables with a ttl only: row r's push stamp, beside `recency` and guarded like it.
    std::vector<uint64_t> pushed_ms;
    // Row r's stamp: the lsn of the push that last stored it (0: loaded or never stamped).
    // Guarded by mu (writers hold it exclusively; pushes of a bounded table also order_mu_).
    std::vector<uint64_t> stamps;
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
  // `key`'s slot in stripe `s` (its lock held, and order_mu_ for a bounded table), added (state
  // unset; newest on the list) when it has none; second: whether it was added.
  std::pair<size_t, bool> FindOrAddRowLocked(size_t s, uint64_t key);

  // The recency list (bounded tables, and tables with a ttl: bounded in time; order_mu_ held).
  bool bounded() const { return row_limit_ != 0 || ttl_ms_ != 0; }
  static uint32_t RowId(size_t stripe, size_t slot) { return uint32_t(stripe + kStripes * slot); }
  Recency& Node(uint32_t id) { return stripes_[id % kStripes].recency[id / kStripes]; }
  void Unlink(uint32_t id);
  void LinkNewest(uint32_t id);
  // Evicts from the old end of the list until the table is within its bound; takes each
  // victim's stripe lock (the caller holds none).
  void EvictOverBound(std::vector<uint64_t>* evicted = nullptr);
  // Evicts the row at the old end of the list (its stripe locked here), appending its key to
  // `*evicted` when given.
  void EvictOldest(std::vector<uint64_t>* evicted);
  // Removes the row in slot `slot` of stripe `s` (its lock and, for a bounded table, order_mu_
  // held): the stripe's last row moves into the hole, so the arrays stay dense.
  void RemoveRowLocked(size_t s, size_t slot, uint64_t key);
  // Whether row `id` / `key` (stored or not) was last pushed at or before now_ms - ttl.
  bool ExpiredLocked(uint32_t id, uint64_t now_ms) const;
  bool KeyExpiredLocked(uint64_t key, uint64_t now_ms) const;
  void ExpireLocked(uint64_t now_ms, std::vector<uint64_t>* evicted);

  const TableConfig config_;
  const uint32_t stride_;
  const uint64_t row_limit_;
  const uint64_t ttl_ms_;
  std::array<Stripe, kStripes> stripes_;
  mutable std::mutex order_mu_;  // bounded tables: pushes, the list, stored_rows_
  uint32_t oldest_ = kNoRow;     // least recently pushed row (order_mu_)
  uint32_t newest_ = kNoRow;
  std::atomic<uint64_t> stored_rows_{0};  // bounded tables (written under order_mu_)
  std::atomic<uint64_t> evicted_{0};
  std::atomic<uint64_t> expired_{0};
};

}  // namespace bx::ps
