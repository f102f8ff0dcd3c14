// Training-to-serving sync (docs/PS.md "Serving sync"): a serving cluster follows a training
// cluster. Every `every`, the primary of each serving shard asks the training shard's primary
// for the rows changed and the keys evicted since the position it last synced (a full copy
// when it has none, or too old a one), and applies the batch as one record of its own
// replication stream: its backups apply the same, a failover keeps it, and no fetch sees part
// of it. The serving cluster takes no pushes.
//
//   PsServerOptions options;
//   options.follower = true;
//   auto server = bx::ps::PsServer::Create(serving.tables, options);
//   auto sync = bx::ps::ServingSync::Start(server->get(), {.training = training, .shard = s});
//
// Threads: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "bx/export.h"
#include "bx/ps/cluster.h"
#include "bx/ps/server.h"
#include "bx/rpc.h"
#include "bx/status.h"

namespace bx::ps {

class ServingSyncCore;

struct BX_EXPORT ServingSyncOptions {
  // The training cluster followed: same shard count, and every serving table one of its
  // tables with the same id, dim and optimiser (rows are copied whole).
  ClusterSpec training;
  uint32_t shard = 0;        // the shard this server serves (of both clusters)
  uint32_t shard_count = 0;  // the serving cluster's: must equal the training cluster's
  // How often a serving primary syncs: the lag stays below this plus one sync's time.
  std::chrono::milliseconds every{1000};
  // For the clients to the training replicas. Its transport's secrets, when empty, are the
  // training cluster's (the sync methods are its replicas' methods, like ps.Checkpoint).
  rpc::ClientOptions client;
  // One call's deadline (the training primary copies a full shard within it).
  std::chrono::milliseconds timeout{60'000};
  std::function<void(std::string_view)> log;  // one line per full copy and failure; stderr
};

struct BX_EXPORT ServingSyncStats {
  uint64_t syncs = 0;        // batches this follower applied as primary
  uint64_t full_copies = 0;  // of them, full copies
  uint64_t failures = 0;     // rounds that applied nothing (training unreachable, ...)
  uint64_t bytes = 0;        // of the batches moved
  // The last batch: its bytes and how long asking, moving and applying it took.
  uint64_t last_bytes = 0;
  std::chrono::microseconds last_duration{0};
};

class BX_EXPORT ServingSync {
 public:
  // Checks the clusters agree (InvalidArgument naming the difference) and starts the follower
  // thread. `server` (created with PsServerOptions::follower) must outlive it.
  static Result<std::unique_ptr<ServingSync>> Start(PsServer* server, ServingSyncOptions options);
  ~ServingSync();  // stops the thread after the round under way
  ServingSyncStats stats() const;

 private:
  explicit ServingSync(std::unique_ptr<ServingSyncCore> core);
  std::unique_ptr<ServingSyncCore> core_;
};

}  // namespace bx::ps
