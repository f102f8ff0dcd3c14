// `bx ps` clients fail fast when the cluster is not there: before a run, one
// connection to every replica the cluster file lists, all at once; a shard none of whose
// replicas accepts one makes the run stop with one line naming each address and why. Also the
// one client transport those commands share.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "bx/ps/client.h"
#include "bx/ps/cluster.h"
#include "bx/status.h"
#include "bx/transport.h"

namespace bx::tools {

// OK when every shard has a replica that accepts a connection on `transport` (its scheme's
// urls) within `timeout`; otherwise Unavailable, one line: per unreachable shard, each
// replica's address and cause (connection refused, no answer in time, authentication refused).
Status CheckShardsReachable(const ps::ClusterSpec& spec, Transport& transport,
                            std::chrono::milliseconds timeout);

// The one transport every RPC client of a `bx ps` client command shares, as they share a NIC
// (left to themselves, a PsClient's shards x (replicas + 1) clients would start one each, with an
// I/O thread each), with the cluster's secret; `options` is pointed at it for `scheme`.
Result<std::unique_ptr<Transport>> CreateSharedClientTransport(const ps::ClusterSpec& spec,
                                                               const std::string& scheme,
                                                               ps::PsClientOptions* options);

// The short cause of a failed connect: "connection refused", "authentication refused (...)",
// "no answer within 3 s", or the status itself.
std::string ConnectFailureCause(const Status& status, std::chrono::milliseconds timeout);

}  // namespace bx::tools
