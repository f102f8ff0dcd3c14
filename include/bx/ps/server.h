// The parameter-server replica: one replica of one shard (docs/PS.md), serving fetches and
// pushes over rpc (rdma:// and tcp://). A shard's replicas are PsServers in different processes
// or hosts; the primary applies pushes and forwards each to its backups before acknowledging it,
// so an acknowledged push survives the primary. A FailoverMonitor on each backup promotes the
// next replica when the primary stops answering.
//
//   auto server = bx::ps::PsServer::Create(spec.tables);
//   (*server)->Start({"rdma://0.0.0.0:7000", "tcp://0.0.0.0:7001"});
//   (*server)->BecomePrimary(/*epoch=*/1, backups);   // on replica 0; the others stay backups
//
// Threads: every method may be called from any thread. bx::Init must have been called.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bx/export.h"
#include "bx/ps/table_config.h"
#include "bx/rpc.h"
#include "bx/status.h"

namespace bx::ps {

class PsServerCore;  // the implementations, inside the library
class FailoverMonitorCore;
class LeasedFailoverCore;

struct BX_EXPORT PsServerCounters {
  uint64_t fetches = 0;
  uint64_t pushes_acked = 0;      // acks sent for new pushes
  uint64_t pushes_duplicate = 0;  // acks sent for retries of applied pushes
  uint64_t push_errors = 0;
  uint64_t forwards = 0;
  // Replica-to-replica calls refused to a caller without the replica secret.
  uint64_t replica_method_refusals = 0;
  // Pushes refused, and waiting pushes failed, while fewer than min_in_sync replicas were in
  // sync (each a retryable ResourceExhausted; nothing acknowledged).
  uint64_t pushes_below_min_in_sync = 0;
  // Pushes refused because this replica did not know their client's session: evicted from the
  // dedup record, or the id bound to another client's key (nothing applied; the client starts
  // a new session).
  uint64_t pushes_session_refused = 0;
  // Clients the dedup record remembers (bounded by max_dedup_clients), and clients it evicted.
  uint64_t dedup_clients = 0;
  uint64_t dedup_evictions = 0;
  // Checkpoint snapshots this replica offered as primary (bx/ps/checkpoint.h).
  uint64_t checkpoints = 0;
};

// One table as a replica holds it: the rows stored and the bytes they take (keys, weights and
// optimiser state; not the index's own overhead).
struct BX_EXPORT PsTableStats {
  uint32_t id = 0;
  std::string name;
  uint32_t dim = 0;
  uint64_t rows = 0;
  uint64_t bytes = 0;
  // A bounded table's (docs/PS.md "Bounded tables"): the most rows it keeps (0: unbounded) and
  // the rows it evicted to keep within that.
  uint64_t row_limit = 0;
  uint64_t evicted = 0;
  // A table with a ttl: rows it expired; with admission: ids admitted, and pushes of ids not
  // yet admitted (counted and dropped). docs/PS.md "Expiry and admission".
  uint64_t expired = 0;
  uint64_t admitted = 0;
  uint64_t admission_rejected = 0;
  // Only when asked for (QueryClusterStats' digests): a hash of every row's key and state,
  // independent of their order; replicas at one position hold the same rows when theirs agree.
  uint64_t digest = 0;
};

struct BX_EXPORT PsServerOptions {
  // The cluster's secret (ClusterSpec::secret; empty: none). Every connection to this server
  // must prove it, and this server proves it to its backups and, through a FailoverMonitor
  // started on it, to the replicas it watches. Overrides the auth_secret of rpc.transport and
  // backup_client.transport.
  std::string auth_secret;
  // The replicas' secret (ClusterSpec::replica_secret; empty: none; needs auth_secret). This
  // server proves it to the other replicas (backup links, failover monitors, catch-up), and
  // answers ps.Forward and ps.Join* only to callers that proved it (PermissionDenied to the
  // others, who may still fetch and push). Sets privileged_secret in rpc.transport and
  // backup_client.transport.
  std::string replica_secret;
  rpc::ServerOptions rpc;
  // Clients this server opens to its backups when it becomes primary. Their heartbeat_timeout and
  // connect_timeout are raised to forward_timeout where below it (a link found dead, or not
  // connected in time, drops its backup), and heartbeat_interval to a fifth of that timeout.
  rpc::ClientOptions backup_client;
  // A forward not acknowledged by a backup within this drops that backup; to it are added the
  // time the forward's bytes, and those of the forwards ahead of it to the same backup, take
  // at backup_client.slowest_transfer_bytes_per_second (16 MiB/s: 4 s more for 64 MiB), so a
  // backup is dropped for being unreachable, not for being sent a large push.
  std::chrono::microseconds forward_timeout = std::chrono::seconds(2);
  // The primary refuses pushes (ResourceExhausted, retry later) while this many are applied but
  // not yet on every backup; every replica keeps that many to re-forward when promoted.
  size_t max_undurable_pushes = 1024;
  // The same in bytes of keys and gradients (a larger push is still taken when nothing else is
  // waiting): every replica's retained log then holds at most this plus one push. Both bounds
  // must be equal on every replica of a shard.
  size_t max_undurable_bytes = size_t{128} << 20;
  // Forwards a backup holds out of order while it waits for a gap to fill.
  size_t max_reordered_forwards = 4096;
  // Exactly-once pushes: per client, how far ahead of its oldest unacknowledged push id a push
  // may be, and how many clients are remembered.
  uint64_t dedup_window = 4096;
  size_t max_dedup_clients = 65536;
  // Gradient sanity: a push holding an element above this in magnitude is refused whole
  // (InvalidArgument naming the key and element) before anything is applied; 0: no bound.
  // Non-finite elements (NaN, +-Inf) are always refused: one would poison its row for good.
  float max_abs_gradient = 1e6f;
  // Replicas of the shard, the primary counted, that must hold a push before it is
  // acknowledged (ClusterSpec::min_in_sync; Kafka's min.insync.replicas). While fewer are in
  // sync (backups dropped, joiners still catching up) the primary refuses pushes with a
  // retryable ResourceExhausted and applies nothing, so one crash cannot lose an acknowledged
  // push; 1 keeps the shard writable on the primary alone (availability over durability).
  size_t min_in_sync = 1;
  // A serving replica that follows a training cluster (bx/ps/serving_sync.h): pushes are
  // refused (InvalidArgument), its rows change only by sync records, and a fetch never sees
  // part of one (fetches take a shard-wide lock shared, a sync takes it exclusively).
  bool follower = false;
  // Tests only: the control that shows a fetch can see a half-applied sync when this is false
  // (no lock; rows applied one by one). Never false in service.
  bool sync_visible_whole = true;
};

class BX_EXPORT PsServer {
 public:
  // A backup replica (epoch 0) holding empty `tables`; not listening yet.
  static Result<std::unique_ptr<PsServer>> Create(const std::vector<TableConfig>& tables,
                                                  PsServerOptions options = {});
  ~PsServer();  // Stop()

  // Listens on each url (port 0: any free port; address() then says which).
  Status Start(const std::vector<std::string>& urls);
  rpc::ReplicaAddress address() const;
  // Promotes this replica to primary of `epoch` (above any it has seen), forwarding every push
  // to `backups` before acknowledging it.
  Status BecomePrimary(uint64_t epoch, const std::vector<rpc::ReplicaAddress>& backups);
  // Before Start, on a new server: takes the rows of the checkpoint in `checkpoint_dir`
  // (bx/ps/checkpoint.h) that this server's shard owns, as shard `shard` of a cluster of
  // `shard_count` shards (ShardOfKey): the checkpoint's shard count or another. Every table of
  // the checkpoint must be one of this server's, with the same config. Every replica of a
  // shard restores the same rows; the cluster's epochs and clients start anew.
  Status RestoreFrom(const std::string& checkpoint_dir, uint32_t shard, uint32_t shard_count);
  // Stops serving (listeners and connections close). Idempotent.
  void Stop();

  PsServerCounters counters() const;
  // Every table's rows and bytes, in id order.
  std::vector<PsTableStats> table_stats() const;
  // The epoch this replica serves as primary now (pushes are taken here), 0 while it is not
  // primary: a health check, or a start-up script waiting for its shard to take pushes.
  uint64_t primary_epoch() const;
  rpc::ServerStats rpc_stats() const;

 private:
  friend class PsInternals;  // the library's own layers and tests (src/ps/service/ps_internals.h)
  explicit PsServer(std::unique_ptr<PsServerCore> core);
  std::unique_ptr<PsServerCore> core_;
};

struct BX_EXPORT FailoverOptions {
  std::vector<rpc::ReplicaAddress> replicas;  // the shard's replicas, in cluster-file order
  size_t self = 0;                            // this replica's index in `replicas`
  size_t initial_primary = 0;
  uint64_t initial_epoch = 1;
  // How often the watched primary is pinged, and how long it may stay silent (or not primary)
  // before the next replica takes over. Give the timeout a margin a loaded host cannot cross.
  std::chrono::milliseconds probe_interval{100};
  std::chrono::milliseconds failure_timeout{1000};
  // For the ping client. Its transport's auth_secret, when empty, is the server's
  // PsServerOptions::auth_secret: a monitor that could not reach a primary only for want of
  // the secret would promote a second one.
  rpc::ClientOptions client;
  std::function<void(std::string_view)> log;  // one line per event; default stderr

  // The shard's configuration store (docs/PS.md "Configuration and leases"): an etcd member's
  // client URL ("http://host:2379") or "memory://<name>" (a store inside this process, shared
  // by every monitor naming it). With one, every replica runs a monitor — the initial primary's
  // creates the configuration and takes the lease — the primary acks only under its lease and
  // drops a backup only by a committed change, and a backup is promoted only after the old
  // primary's lease expired: no acknowledged push is lost to a pause or a partition.
  // Empty: Start refuses, unless unsafe_without_leases names the lease-less detector above
  // (promotes on silence; a paused or partitioned primary can keep acknowledging alone, so two
  // primaries can each lose the other's acknowledged pushes — kept as the chaos tests' control).
  std::string config_store;
  bool unsafe_without_leases = false;
  std::string config_prefix = "/bexpress/ps";  // this cluster's keys in the store
  uint32_t shard = 0;                          // the shard these replicas serve
  // The primary's lease; a backup takes over at the earliest this long after the primary
  // last renewed it (etcd grants whole seconds, at least its own minimum).
  std::chrono::milliseconds lease_ttl{2000};
};

// What a planned handover did: the backup that took the shard over, and the position (the old
// primary's epoch and its last applied lsn) it held when it did.
struct BX_EXPORT HandoverResult {
  uint32_t successor = 0;
  uint64_t epoch = 0;
  uint64_t lsn = 0;
};

// With FailoverOptions::config_store: runs on every replica and keeps the shard's configuration
// and the primary's lease in that store (docs/PS.md "Configuration and leases"). Without (and
// only with FailoverOptions::unsafe_without_leases): watches
// the shard's primary from a backup and promotes the next replica in cluster-file order when the
// primary stops answering (docs/PS.md "Automatic failover"); there is no quorum and no lease, so
// a pause or a partition can leave two primaries.
class BX_EXPORT FailoverMonitor {
 public:
  // Starts watching on a thread of its own. `server` must outlive the monitor.
  static Result<std::unique_ptr<FailoverMonitor>> Start(PsServer* server, FailoverOptions options);
  ~FailoverMonitor();  // stops the thread

  // The epoch this replica promoted itself to, 0 while it has not.
  uint64_t promoted_epoch() const;

  // Planned handover (docs/PS.md "Planned handover"; `bx ps serve` does it on SIGTERM, `bx ps
  // handover` asks for it over the network): this primary stops taking pushes, waits until
  // they are durable, names a backup holding them all (`to`, or the first in replica order)
  // its successor in the store and gives its lease back; the successor promotes itself at
  // once, and this replica rejoins as a backup (catch-up) if it stays. Needs a config store.
  // FailedPrecondition when this replica is not the primary, DeadlineExceeded when the pushes
  // were not durable within `timeout`; on any error the primary goes on taking pushes.
  Result<HandoverResult> HandOver(std::optional<uint32_t> to = std::nullopt,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  friend class PsInternals;  // the library's own layers and tests (src/ps/service/ps_internals.h)
  FailoverMonitor(std::unique_ptr<FailoverMonitorCore> core,
                  std::unique_ptr<LeasedFailoverCore> leased);
  std::unique_ptr<FailoverMonitorCore> core_;   // without a config store
  std::unique_ptr<LeasedFailoverCore> leased_;  // with one
};

}  // namespace bx::ps
