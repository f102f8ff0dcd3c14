// What every replica of a cluster holds and does, asked over the network (`bx ps stat`,
// docs/PS.md "Inspection"): role, position, backups, counters and per-table rows and bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bx/export.h"
#include "bx/ps/cluster.h"
#include "bx/ps/server.h"
#include "bx/rpc.h"
#include "bx/status.h"

namespace bx::ps {

struct BX_EXPORT ReplicaStats {
  uint32_t shard = 0;
  uint32_t replica = 0;
  std::string address;  // the replica's address as asked
  Status status;        // of the ask; when not OK the fields below are empty
  std::string role;     // "primary", "backup" or "fenced"
  uint64_t epoch = 0;
  uint64_t lsn = 0;           // the last push applied
  uint64_t live_backups = 0;  // a primary's
  PsServerCounters counters;
  std::vector<PsTableStats> tables;
  // The last checkpoint this replica served whole as primary (bx/ps/checkpoint.h): its
  // position and wall-clock time in ms since the Unix epoch; 0: none since it started.
  uint64_t last_checkpoint_unix_ms = 0;
  uint64_t last_checkpoint_epoch = 0;
  uint64_t last_checkpoint_lsn = 0;
  // A serving replica's (docs/PS.md "Serving sync"): whether it follows a training cluster, the
  // training shard's position it holds, and when its follower asked for that (ms since the
  // Unix epoch; 0: never synced); lag_ms is the replica's now minus that when it answered.
  bool follower = false;
  uint64_t synced_epoch = 0;
  uint64_t synced_lsn = 0;
  uint64_t synced_asked_unix_ms = 0;
  uint64_t sync_lag_ms = 0;
  uint64_t syncs_applied = 0;
  uint64_t sync_full_copies = 0;
};

// Asks every replica of `cluster`, all at once, each within `timeout`: one entry per replica,
// in cluster-file order. A replica that does not answer has its status set, not an error of
// the whole call. `client`'s transport secret, when empty, is the cluster's. `digests`: each
// replica also hashes its tables' rows (PsTableStats::digest; a scan of every table).
BX_EXPORT std::vector<ReplicaStats> QueryClusterStats(
    const ClusterSpec& cluster, std::chrono::milliseconds timeout = std::chrono::seconds(3),
    rpc::ClientOptions client = {}, bool digests = false);

}  // namespace bx::ps
