// Checkpoints of a whole parameter-server cluster (docs/PS.md "Checkpoints"): every shard's
// state at one position of its push stream, written to a directory, and a cluster started
// from one, with the same or another number of shards.
//
//   auto manifest = bx::ps::WriteCheckpoint(*spec, "/ckpt/step-1000");  // while trainers push
//   ...
//   auto server = bx::ps::PsServer::Create(spec->tables, options);
//   (*server)->RestoreFrom("/ckpt/step-1000", shard, spec->shards.size());  // before Start
//
// A checkpoint directory holds one snapshot file per shard (docs/PS.md "Snapshot file") and
// manifest.json, written last and atomically: a directory without a manifest is no checkpoint.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bx/export.h"
#include "bx/ps/cluster.h"
#include "bx/rpc.h"
#include "bx/status.h"

namespace bx::ps {

struct BX_EXPORT CheckpointShard {
  uint32_t shard = 0;
  std::string file;  // in the checkpoint directory
  // The position of the shard's push stream the file holds: every push the primary of
  // `epoch` applied up to `lsn`, each of them durable (on min_in_sync replicas) when taken.
  uint64_t epoch = 0;
  uint64_t lsn = 0;
  uint64_t bytes = 0;  // of the file
};

struct BX_EXPORT CheckpointManifest {
  uint32_t shard_count = 0;
  uint64_t created_unix_ms = 0;
  std::vector<CheckpointShard> shards;  // one per shard, in shard order
};

struct BX_EXPORT CheckpointOptions {
  // For the clients to each replica. Its transport's auth_secret and privileged_secret, when
  // empty, are the cluster's: the checkpoint methods are the replicas' (like ps.Join).
  rpc::ClientOptions client;
  // How long one shard may take: its primary's copy, the wait for that position to be
  // durable, and the transfer.
  std::chrono::milliseconds shard_timeout{120'000};
};

// Asks every shard's primary for its state at its newest durable position, one shard after
// another, while pushes go on, and writes them under `dir` (created if absent; an existing
// checkpoint there is an error). The manifest is written last (fsynced, renamed).
BX_EXPORT Result<CheckpointManifest> WriteCheckpoint(const ClusterSpec& cluster,
                                                     const std::string& dir,
                                                     const CheckpointOptions& options = {});

// The manifest of the checkpoint in `dir`, checked against the files it names (present, of
// the sizes it says). NotFound when `dir` holds no manifest (no checkpoint, or an unfinished
// one).
BX_EXPORT Result<CheckpointManifest> ReadCheckpointManifest(const std::string& dir);

struct BX_EXPORT ExportOptions {
  // Also the optimiser's per-row state (AdaGrad's accumulators) as "state", rows x (floats per
  // row beyond dim); a table whose optimiser keeps none has no "state".
  bool optimizer_state = false;
};

// Writes table `table` (by name) of the checkpoint in `dir` as a NumPy .npz at `npz_path`:
// "keys" (uint64, n) and "rows" (float32, n x dim), row i for key i, in no particular order.
// Returns n. NotFound (naming the checkpoint's tables) when it has no such table.
BX_EXPORT Result<uint64_t> ExportCheckpointTable(const std::string& dir, const std::string& table,
                                                 const std::string& npz_path,
                                                 const ExportOptions& options = {});

}  // namespace bx::ps
