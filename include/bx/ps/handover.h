// Planned handover of a shard from its primary to a backup, asked over the network (`bx ps
// handover`; docs/PS.md "Planned handover"): for maintenance of the primary's host without the
// lease-long stall of a failover.
//
//   auto done = bx::ps::HandOverShard(*spec, /*shard=*/0);   // while trainers push
//   // done->successor is primary now; the old primary rejoins as a backup
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "bx/export.h"
#include "bx/ps/cluster.h"
#include "bx/ps/server.h"
#include "bx/rpc.h"
#include "bx/status.h"

namespace bx::ps {

struct BX_EXPORT HandoverOptions {
  // For the clients to the shard's replicas. Its transport's auth_secret and privileged_secret,
  // when empty, are the cluster's: ps.Handover is a replicas' method.
  rpc::ClientOptions client;
  // The backup to hand the shard to; default: the first in replica order that holds every push.
  std::optional<uint32_t> to;
  // How long the primary may take to make its pushes durable and name the successor.
  std::chrono::milliseconds timeout{5000};
};

// Finds `shard`'s primary and asks it to hand the shard over (FailoverMonitor::HandOver). Needs
// a cluster with a configuration store. Unavailable when no replica answers as primary.
BX_EXPORT Result<HandoverResult> HandOverShard(const ClusterSpec& cluster, uint32_t shard,
                                               const HandoverOptions& options = {});

}  // namespace bx::ps
