// ShardState: everything one replica of one shard holds — its tables, the dedup record of
// applied pushes, and its replication position (epoch, lsn) — and its snapshot file.
//
// Thread-safety: tables() lookups and Table methods are safe from any thread (tables are only
// added, never removed, and live as long as the ShardState). dedup() and the replication
// position are not synchronised: the owner (ShardReplica) serialises pushes and saves.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "base/wire_version.h"
#include "bx/ps/table_config.h"
#include "bx/status.h"
#include "ps/push_admission.h"
#include "ps/push_dedup.h"
#include "ps/table.h"
#include "ps/wire.h"

namespace bx::ps {

class ShardState {
 public:
  explicit ShardState(PushDedup::Options dedup_options = {}) : dedup_(dedup_options) {}

  // Creates a table. Creating an existing id again with an identical config is a no-op (every
  // server may create the cluster file's tables at start); a different config is an error.
  Status CreateTable(const TableConfig& config);
  // The table with `id`, or null.
  Table* table(uint32_t id) const;
  std::vector<uint32_t> table_ids() const;

  // Checks a push against the tables (known table, dim, gradient count, dense key range)
  // without applying it.
  Status ValidatePush(const PushRequest& push) const;
  // Validates and applies a push (no dedup: that is the caller's decision). With tables that
  // expire rows, the push's stamp moves the push clock (clock_ms) and every such table expires
  // its rows against it; with admission, ids without a row are counted and only admitted ones
  // applied (docs/PS.md "Expiry and admission"). A refused push changes nothing. `stamp` marks
  // the rows it stores (Table::Push); keys tables evict or expire go to `*evicted` as (table,
  // key). A sync record (push.sync) is applied by ApplySync.
  Status ApplyPush(const PushRequest& push, uint64_t stamp = 0,
                   std::vector<std::pair<uint32_t, uint64_t>>* evicted = nullptr,
                   bool pause_between_rows = false);
  // Whether a table expires rows: the primary then stamps every push to the shard.
  bool has_ttl_tables() const;
  // Table `id`'s admission counts, or null (no admission).
  PushAdmission* admission(uint32_t id) const;
  // A serving replica's sync (docs/PS.md "Serving sync"): every table of the batch takes its
  // rows (a full copy empties them first; tables of this shard missing from a full copy are
  // emptied too), and `synced` moves to the batch's source position.
  Status ApplySync(const SyncBatch& batch, uint64_t stamp, bool pause_between_rows = false);

  // The training shard's position this (serving) replica holds, and when the follower asked
  // for it: set by ApplySync, so it replicates with the sync records (not saved in snapshots:
  // a replica caught up from one learns it at the next sync).
  struct Synced {
    uint64_t epoch = 0;
    uint64_t lsn = 0;
    uint64_t asked_at_ms = 0;  // 0: never synced
  };
  Synced synced;

  PushDedup& dedup() { return dedup_; }
  const PushDedup& dedup() const { return dedup_; }

  // Snapshot versions this build reads (every one) and writes (from kOldestWrittenSnapshot):
  // 1 the first; 2 dedup client keys and a word checksum; 3 table bounds and evictions; 4 the
  // push clock, ttl and admission.
  static constexpr VersionRange kSnapshotVersions{1, 4};
  static constexpr uint32_t kOldestWrittenSnapshot = 2;

  // Replication position: the epoch this replica last served or followed and the last lsn it
  // applied in that epoch (see ShardReplica).
  uint64_t epoch = 0;
  uint64_t applied_lsn = 0;
  // The push clock: the newest push stamp applied (the primary's clock, in ms since the Unix
  // epoch), never decreasing. Rows of tables with a ttl expire against it, not a local clock.
  uint64_t clock_ms = 0;

  // Writes the state to `path` atomically (path + ".tmp", fsync, rename). The caller ensures
  // no push runs concurrently. Format: docs/PS.md "Snapshot file".
  Status Save(const std::string& path) const;
  // Reads a snapshot written by Save, verifying header, version and checksum.
  static Result<std::unique_ptr<ShardState>> Load(const std::string& path,
                                                  PushDedup::Options dedup_options = {});
  // The same format in memory (a primary's snapshot for a joining replica, docs/PS.md
  // "Catch-up"), at `version` (kSnapshotVersions.newest, or an older one a joiner reads: see
  // CheckEncodable). Encode's caller ensures no push runs concurrently.
  Result<std::vector<std::byte>> Encode(uint32_t version = kSnapshotVersions.newest) const;
  // Whether the state can be written at snapshot `version`: FailedPrecondition naming what an
  // older version cannot carry (version 2: bounded tables), or a version never written.
  Status CheckEncodable(uint32_t version) const;
  static Result<std::unique_ptr<ShardState>> Decode(std::span<const std::byte> bytes,
                                                    PushDedup::Options dedup_options = {});
  // A copy (tables, dedup record, position), made at memory speed while the caller keeps
  // pushes out, to be encoded after they resume: encoding a large shard in place stalled every
  // push for seconds.
  Result<std::unique_ptr<ShardState>> Copy() const;

  // Takes over `other`'s rows, dedup record and position (a snapshot received whole), table
  // by table under the tables' locks so that concurrent fetches stay safe: a fetch sees each
  // row either before or after. Tables absent from `other` are emptied; `other`'s tables must
  // have configs identical to ours where ids meet.
  Status Adopt(ShardState& other);

  // Gives table `id` other bounds (a checkpoint restored into a cluster file whose bounds
  // differ): its rows move to a new table in recency order, the oldest evicted when the new
  // bound is smaller. Replaces the table object: only for a state nobody else uses yet.
  Status Rebound(uint32_t id, uint64_t max_rows, uint64_t max_bytes);

 private:
  mutable std::shared_mutex tables_mu_;
  std::map<uint32_t, std::unique_ptr<Table>> tables_;
  // Tables with admit_after_pushes >= 2; created with their table, under tables_mu_.
  std::map<uint32_t, std::unique_ptr<PushAdmission>> admission_;
  PushDedup dedup_;
};

}  // namespace bx::ps
