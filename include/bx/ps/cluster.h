// The cluster file: which tables exist, how many shards, and where each shard's replicas listen.
// Keys are routed to shards by ShardOfKey (stable across processes, runs and hosts; see
// docs/PS.md). Plain values and pure functions: thread-safe to read concurrently.
//
// Format (JSON, version 1):
//   {
//     "version": 1,
//     "transport": "rdma",                  // optional: "rdma" (default) or "tcp"
//     "secret_file": "cluster.secret",      // or "insecure": true; see ClusterSpec::secret
//     "config_store": "http://10.0.0.9:2379", // optional: see ClusterSpec::config_store
//     "rdma": {"traffic_class": 106, "service_level": 3, "gid_index": 3}, // optional: see rdma
//     "tables": [                           // optional
//       {"id": 1, "name": "user", "kind": "embedding", "dim": 16,
//        "init": {"kind": "normal", "mean": 0, "stddev": 0.01, "seed": 7},
//        "optimizer": {"kind": "adagrad", "learning_rate": 0.05}},
//       {"id": 2, "name": "mlp", "kind": "dense", "dim": 256, "rows": 64}
//     ],
//     "shards": [                           // shard i is the i-th entry
//       {"replicas": [{"rdma": "rdma://10.0.0.1:7000", "tcp": "tcp://10.0.0.1:7001"},
//                     {"rdma": "rdma://10.0.0.2:7000", "tcp": "tcp://10.0.0.2:7001"}]}
//     ]
//   }
// Replica 0 of each shard is the initial primary. A replica needs at least one address; every
// address a port from 1 to 65535 of its own (no two addresses share host and port, whatever
// their schemes: rdma:// listens on a TCP port too).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bx/export.h"
#include "bx/ps/table_config.h"
#include "bx/status.h"

namespace bx::ps {

struct BX_EXPORT ReplicaSpec {
  std::string rdma;  // "rdma://host:port", or empty
  std::string tcp;   // "tcp://host:port", or empty
};

struct BX_EXPORT ShardSpec {
  std::vector<ReplicaSpec> replicas;  // [0] is the initial primary
};

struct BX_EXPORT ClusterSpec {
  std::string transport = "rdma";  // preferred scheme; tcp is the fallback
  // The cluster's shared secret: every server and client of the cluster proves it knows it
  // before a connection is accepted, on both transports (TransportOptions::auth_secret), so
  // nobody else can call any method, replication included. `secret_file` names the file that
  // holds it, relative to the cluster file; LoadClusterFile reads it into `secret` and refuses
  // a file that other users can read (chmod 600). ParseClusterSpec leaves `secret` empty.
  std::string secret_file;
  std::string secret;
  // The replicas' own secret (`replica_secret_file`, read as `secret_file` is, needing one, and
  // holding a different secret): replicas prove it to one another, and the replica-to-replica
  // methods (ps.Forward, ps.Join*) refuse callers that proved only the cluster secret
  // (PermissionDenied). Trainers and rankers need not have it: their copy of the cluster file
  // may leave the field out. Without it, the cluster secret alone opens those methods.
  std::string replica_secret_file;
  std::string replica_secret;
  // Where the shards' configuration and the primaries' leases live (docs/PS.md "Configuration
  // and leases"): an etcd client URL, "http://host:port". `bx ps serve` uses it unless --etcd
  // names another; without either, its failover is off.
  std::string config_store;
  // rdma:// addressing for every process of the cluster (docs/DEPLOYING.md); -1 leaves the
  // transport's default. `bx ps` and `bx demo` make them the process's BX_GID_INDEX,
  // BX_TRAFFIC_CLASS and BX_SERVICE_LEVEL unless the host sets those itself (a host's own
  // setting wins); a program of its own copies them into its RdmaOptions.
  struct RdmaSettings {
    int gid_index = -1;      // 0..255
    int traffic_class = -1;  // 0..255: DSCP << 2 | ECN
    int service_level = -1;  // 0..15
    bool empty() const { return gid_index < 0 && traffic_class < 0 && service_level < 0; }
  } rdma;
  std::vector<TableConfig> tables;
  std::vector<ShardSpec> shards;
  // Replicas, the primary counted, that must hold a push before it is acknowledged
  // (PsServerOptions::min_in_sync); at most every shard's replica count. 0 (the field left
  // out): 2 for shards of 3 or more replicas, 1 otherwise (MinInSyncOf).
  size_t min_in_sync = 0;
  // An open cluster, on purpose: `"insecure": true` in the file lets it go without a
  // `secret_file`, and then every method of every server is served to anyone who can connect.
  // LoadClusterFile refuses a file with neither (an open cluster by omission), and one with
  // both; `bx ps serve` says so at start.
  bool insecure = false;
};

// The min_in_sync a server of `shard` runs with: the file's, or the default for its size.
BX_EXPORT size_t MinInSyncOf(const ClusterSpec& spec, size_t shard);

// Parses the JSON text of a cluster file. Errors name the JSON path ("shards[1].replicas[0]").
BX_EXPORT Result<ClusterSpec> ParseClusterSpec(std::string_view json_text);
// Reads and parses a cluster file; errors are prefixed with the path. A file that names no
// `secret_file` must say `"insecure": true`.
BX_EXPORT Result<ClusterSpec> LoadClusterFile(const std::string& path);
// The JSON text of a spec (what ParseClusterSpec reads back to an equal spec).
BX_EXPORT std::string ClusterSpecToJson(const ClusterSpec& spec);

// The shard that owns `key` among `shard_count` (> 0) shards:
//   ShardOfKey(key, n) = (Mix64(key) * n) >> 64   (128-bit product)
// where Mix64 is the SplitMix64 finaliser. Mixing first makes sequential ids balanced; the
// multiply-shift maps the 64-bit hash onto [0, n) without the bias and cost of a modulo.
// Changing this function re-shards every existing model: it is part of the file format.
BX_EXPORT uint32_t ShardOfKey(uint64_t key, uint32_t shard_count);

// The SplitMix64 finaliser (Stafford's Mix13 constants): a bijection on 64-bit values.
constexpr uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// The keys of one request that go to one shard, with their positions in the request so that
// the shard's answer can be scattered back.
struct BX_EXPORT ShardBatch {
  uint32_t shard = 0;
  std::vector<uint64_t> keys;
  std::vector<uint32_t> positions;  // keys[i] was request key positions[i]
};

// Splits `keys` by shard; only shards with at least one key appear, in increasing shard order.
BX_EXPORT std::vector<ShardBatch> SplitByShard(std::span<const uint64_t> keys,
                                               uint32_t shard_count);

}  // namespace bx::ps
