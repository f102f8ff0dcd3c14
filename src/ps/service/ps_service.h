// The parameter server on the network: PsServerCore puts one ShardReplica behind an rpc::Server
// ("ps.Fetch", "ps.Push", "ps.Forward"), RpcBackupLink carries a primary's forwards to a backup
// over an rpc::Client, and PsClientCore routes fetches and pushes of a whole cluster by shard.
// Wire formats: docs/PS.md; the RPC layer: include/bx/rpc.h. FailoverMonitorCore is the failure
// detector that promotes a backup when its primary stops answering "ps.Ping" (docs/PS.md
// "Automatic failover").
//
// Thread-safety: every public method may be called from any thread once Create returned.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/shared_slot.h"
#include "bx/ps/client.h"
#include "bx/ps/cluster.h"
#include "bx/ps/server.h"
#include "bx/rpc.h"
#include "bx/status.h"
#include "ps/coord/kv_store.h"
#include "ps/coord/shard_coordinator.h"
#include "ps/shard_replica.h"
#include "ps/wire.h"

namespace bx::ps {

inline constexpr std::string_view kFetchMethod = "ps.Fetch";
inline constexpr std::string_view kPushMethod = "ps.Push";
inline constexpr std::string_view kForwardMethod = "ps.Forward";
inline constexpr std::string_view kPingMethod = "ps.Ping";
// Catch-up (docs/PS.md "Catch-up"): a replica outside the set asks the primary for a snapshot
// ("ps.Join": u32 replica, u32 n, n bytes incarnation -> kJoinOfferBytes: u64 token, u64 epoch,
// u64 lsn, u64 snapshot bytes), reads it in pieces ("ps.JoinChunk": u64 token, u64 offset ->
// up to kJoinChunkBytes), installs it and asks to be sent the pushes after it
// ("ps.JoinAttach": u64 token -> empty).
// "ps.Join.v2" is ps.Join with a u32 after the incarnation: the newest snapshot version the
// joiner reads, which the primary writes at (or refuses, saying what needs a newer one). A
// joiner falls back to ps.Join when the primary does not serve ps.Join.v2 (an older build), and
// a primary answers ps.Join (an older joiner) at kJoinSnapshotVersion: a replica of either
// build can catch up from the other (docs/DEPLOYING.md "Upgrades").
inline constexpr std::string_view kJoinMethod = "ps.Join";
inline constexpr std::string_view kJoinV2Method = "ps.Join.v2";
inline constexpr uint32_t kJoinSnapshotVersion = 2;  // the newest every ps.Join caller reads
inline constexpr std::string_view kJoinChunkMethod = "ps.JoinChunk";
inline constexpr std::string_view kJoinAttachMethod = "ps.JoinAttach";
inline constexpr size_t kJoinOfferBytes = 32;
inline constexpr size_t kJoinChunkBytes = size_t{1} << 20;
// Chunks a joiner has requested at once.
inline constexpr size_t kJoinChunksAhead = 8;

// Checkpoints (docs/PS.md "Checkpoints"): "ps.Checkpoint" (u64 request id, u64 ms the
// position may take to become durable -> u64 token, u64 epoch, u64 lsn, u64 snapshot bytes;
// Unavailable "ask again" while the primary prepares it), then "ps.CheckpointChunk" (u64 token,
// u64 offset -> up to kJoinChunkBytes). Replicas' methods: with a replica secret, only for
// callers that proved it.
inline constexpr std::string_view kCheckpointMethod = "ps.Checkpoint";
// "ps.Stat" (docs/PS.md "Inspection"): an empty request -> a JSON object: role, epoch, lsn,
// live_backups, counters, tables. For any caller that passed the cluster's secret.
inline constexpr std::string_view kStatMethod = "ps.Stat";
inline constexpr std::string_view kCheckpointChunkMethod = "ps.CheckpointChunk";

// Serving sync (docs/PS.md "Serving sync"): a follower asks a training primary for what
// changed since its position ("ps.SyncDelta": u64 since epoch, u64 since lsn -> u64 token,
// u64 epoch, u64 lsn, u64 bytes of the SyncBatch), then reads it in pieces ("ps.SyncChunk":
// u64 token, u64 offset -> up to kJoinChunkBytes). Replicas' methods.
inline constexpr std::string_view kSyncDeltaMethod = "ps.SyncDelta";
inline constexpr std::string_view kSyncChunkMethod = "ps.SyncChunk";
// A serving replica's lag: its wall clock now minus when its follower asked for the batch it
// holds (0 when it has none, or the clocks of two hosts disagree that far).
uint64_t SyncLagMs(const ShardState::Synced& synced);

// Planned handover (docs/PS.md "Planned handover"): "ps.Handover" (u64 replica to hand over
// to, or kAnyBackup; u64 ms it may take -> u64 successor, u64 epoch, u64 lsn: the position the
// successor holds), asked of the primary; "ps.TakeOver" (empty -> empty), the old primary
// telling its successor to look at the store now rather than at its next probe. Replicas'
// methods.
inline constexpr std::string_view kHandoverMethod = "ps.Handover";
inline constexpr std::string_view kTakeOverMethod = "ps.TakeOver";
inline constexpr uint64_t kAnyBackup = UINT64_MAX;
// The primary's monitor behind those methods (PsServerCore::SetHandoverService).
class HandoverService {
 public:
  virtual ~HandoverService() = default;
  // `done` runs once, on any thread, when the handover is finished or refused.
  virtual void HandOver(std::optional<uint32_t> to, std::chrono::milliseconds timeout,
                        std::function<void(Result<HandoverResult>)> done) = 0;
  // The primary handed this replica the shard: step now.
  virtual void TakeOver() = 0;
};

// "ps.Ping": an empty request; the reply is kPingReplyBytes: u8 role (0 backup, 1 primary,
// 2 fenced), 7 x u8 0, u64 epoch, u64 applied lsn (little-endian).
inline constexpr size_t kPingReplyBytes = 24;
struct PingReply {
  ShardReplica::Role role = ShardReplica::Role::kBackup;
  ShardReplica::Position position;
};
void EncodePingReply(const PingReply& reply, std::span<std::byte> out);  // kPingReplyBytes
Result<PingReply> DecodePingReply(std::span<const std::byte> bytes);
// The bytes of a received message, for the decoders.
inline std::span<const std::byte> Bytes(const rpc::Message& message) {
  return {message.data(), message.size()};
}
// One call of `method`, waited for and not retried by the RPC layer: the caller decides what a
// failure means (a probe, a step of catch-up).
Result<rpc::Message> CallOnce(rpc::Client& client, std::string_view method, rpc::Message request,
                              std::chrono::milliseconds timeout);
// Messages of u64s (the catch-up and checkpoint methods): one of `values`, and the decoding of
// one of exactly out.size().
Result<rpc::Message> U64Message(std::initializer_list<uint64_t> values);
bool GetU64s(std::span<const std::byte> bytes, std::initializer_list<uint64_t*> out);
// Snapshots in pieces (ps.JoinChunk, ps.CheckpointChunk: u64 token, u64 offset -> up to
// kJoinChunkBytes). The server's side answers the piece of `bytes` at `offset` and returns its
// length (0: refused). The reader requests kJoinChunksAhead pieces at once and hands them to
// `sink` in order; the server's workers may answer them in any order, so the last piece served
// is not the last one read.
size_t RespondWithChunk(rpc::ServerCall call, std::span<const std::byte> bytes, uint64_t offset);
Status ReadChunks(rpc::Client& client, std::string_view method, uint64_t token, uint64_t size,
                  std::chrono::milliseconds timeout,
                  const std::function<Status(std::span<const std::byte>)>& sink);
// One "ps.Ping" over `client`, or over a client of its own (connecting counts against
// `timeout`).
Result<PingReply> Ping(rpc::Client& client, std::chrono::milliseconds timeout);
Result<PingReply> PingReplicaOnce(const rpc::ReplicaAddress& replica,
                                  const rpc::ClientOptions& options,
                                  std::chrono::milliseconds timeout);

// The primary's side of catch-up, behind "ps.Join*" (PsServerCore::SetJoinService).
struct JoinOffer {
  uint64_t token = 0;  // names the snapshot in JoinChunk and JoinAttach
  ShardReplica::Position position;
  uint64_t bytes = 0;
};
class JoinService {
 public:
  virtual ~JoinService() = default;
  // The snapshot for `replica`, whose process registered as `incarnation`. Taking one can
  // outlast any call's deadline (seconds for a large shard), so it is prepared in the
  // background: Unavailable ("preparing") until it is ready, asked again; the same offer for
  // every ask of the same process until it attaches.
  // `snapshot_version`: the newest snapshot version the joiner reads.
  virtual Result<JoinOffer> Begin(uint32_t replica, const std::string& incarnation,
                                  uint32_t snapshot_version) = 0;
  virtual Result<std::shared_ptr<const std::vector<std::byte>>> Snapshot(uint64_t token) = 0;
  // The joiner installed the snapshot: send it the pushes after it.
  virtual Status Attach(uint64_t token) = 0;
};

// The joiner's side: asks the primary at `primary` for a snapshot, installs it in `replica`
// and attaches. Each call gets `timeout`. Returns the installed position and snapshot size.
struct CatchUpResult {
  ShardReplica::Position position;
  uint64_t bytes = 0;
  // Where the time went: the primary taking the snapshot (the ps.Join call), moving it, and
  // installing it here.
  std::chrono::milliseconds offer_time{0}, transfer_time{0}, install_time{0};
};
Result<CatchUpResult> CatchUpFrom(const rpc::ReplicaAddress& primary,
                                  const rpc::ClientOptions& options, uint32_t self,
                                  const std::string& incarnation, ShardReplica& replica,
                                  std::chrono::milliseconds timeout);

// A primary's link to one backup: each forward is one "ps.Forward" call. The call is marked
// idempotent because the backup dedups by lsn and push id, so an RPC-level retry is harmless.
class RpcBackupLink : public BackupLink {
 public:
  // A forward's deadline is `timeout` plus the time its bytes, and those of the forwards still
  // ahead of it on this link, take at `bytes_per_second` (0: `timeout` alone): a 64 MiB push
  // is given the time to travel and be applied, and a small one queued behind it the same.
  // Each forward still ahead adds kForwardAllowance too: a joiner's backlog of 35,000 small
  // pushes, sent at once, outlasted a bytes-only deadline while the joiner applied them, and
  // the joiner was dropped. (A member has at most max_undurable_pushes ahead: 2 s more.)
  static constexpr std::chrono::microseconds kForwardAllowance{2000};
  RpcBackupLink(std::shared_ptr<rpc::Client> client, std::chrono::microseconds timeout,
                size_t bytes_per_second)
      : client_(std::move(client)), timeout_(timeout), bytes_per_second_(bytes_per_second) {}
  void Forward(uint64_t epoch, uint64_t lsn, const PushRequest& push,
               std::function<void(Status)> done) override;

 private:
  std::shared_ptr<rpc::Client> client_;
  const std::chrono::microseconds timeout_;
  const size_t bytes_per_second_;
  // Bytes and count of the forwards sent and not yet answered (shared with their callbacks,
  // which may outlive the link).
  struct InFlight {
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> count{0};
  };
  std::shared_ptr<InFlight> in_flight_ = std::make_shared<InFlight>();
};

class PsServerCore {
 public:
  // A backup replica (epoch 0) holding `tables`; not listening yet.
  static Result<std::unique_ptr<PsServerCore>> Create(const std::vector<TableConfig>& tables,
                                                      PsServerOptions options = {});
  ~PsServerCore();  // Stop()

  Status Start(const std::vector<std::string>& urls) { return server_->Start(urls); }
  rpc::ReplicaAddress address() const { return server_->address(); }
  // Promotes this replica to primary of `epoch`, forwarding to `backups` (one rpc::Client each).
  Status BecomePrimary(uint64_t epoch, const std::vector<rpc::ReplicaAddress>& backups,
                       ShardReplica::PrimaryGuard guard = {});
  // A link to a backup that joins later (catch-up), over a client kept per address.
  Result<std::shared_ptr<BackupLink>> LinkTo(const rpc::ReplicaAddress& backup);
  // Stops serving (listeners and connections close); the replica state stays readable.
  void Stop();
  // A new replica takes its rows from a checkpoint (PsServer::RestoreFrom).
  Status RestoreFrom(const std::string& dir, uint32_t shard, uint32_t shard_count);

  ShardReplica& replica() { return replica_; }
  const ShardReplica& replica() const { return replica_; }
  // Decides whether this replica may answer a fetch now (OK) or must refuse it (the status the
  // client gets). Empty (the default): every fetch is answered. Set by a leased failover
  // monitor, which clears it before it goes away.
  void SetReadGate(std::function<Status()> gate);
  // Serves "ps.Join*" through `service` (null: refused, the default).
  void SetJoinService(std::shared_ptr<JoinService> service);
  // Serves "ps.Handover" and "ps.TakeOver" through `service` (null: refused, the default).
  void SetHandoverService(std::shared_ptr<HandoverService> service);
  // Gives `transport` this server's cluster and replica secrets where it has none of its own: a
  // failover monitor's client proves what its server does (one that could not reach a primary
  // only for want of a secret would promote a second one).
  void LendSecrets(TransportOptions* transport) const;
  PsServerCounters counters() const;
  // digest: also hash every table's rows (a scan of each, PsTableStats::digest).
  std::vector<PsTableStats> TableStats(bool digest = false) const;
  rpc::ServerStats rpc_stats() const { return server_->stats(); }
  void CountCheckpointOffered() { checkpoints_offered_.fetch_add(1, std::memory_order_relaxed); }
  // The position and wall-clock time (ms since the epoch) of the last checkpoint this replica
  // served to its end as primary; 0: none.
  std::pair<ShardReplica::Position, uint64_t> LastCheckpoint() const;

 private:
  explicit PsServerCore(PsServerOptions options);
  Status Register();
  // A link to one backup over `client`, with this server's forward deadline rule.
  std::shared_ptr<BackupLink> NewBackupLink(std::shared_ptr<rpc::Client> client) const;
  void OnFetch(rpc::ServerCall call);
  void OnPush(rpc::ServerCall call);
  void OnForward(rpc::ServerCall call);
  void OnPing(rpc::ServerCall call);
  void OnJoin(rpc::ServerCall call);  // ps.Join and ps.Join.v2
  void OnJoinChunk(rpc::ServerCall call);
  void OnJoinAttach(rpc::ServerCall call);
  void OnStat(rpc::ServerCall call);
  void OnHandover(rpc::ServerCall call);
  void OnTakeOver(rpc::ServerCall call);
  void OnCheckpoint(rpc::ServerCall call);
  void OnCheckpointChunk(rpc::ServerCall call);
  void OnSyncDelta(rpc::ServerCall call);
  void OnSyncChunk(rpc::ServerCall call);

  PsServerOptions options_;
  ShardReplica replica_;
  std::unique_ptr<rpc::Server> server_;
  SharedSlot<const std::function<Status()>> read_gate_;
  SharedSlot<JoinService> join_service_;
  SharedSlot<HandoverService> handover_service_;
  class CheckpointDesk;  // checkpoint.cc
  static std::shared_ptr<CheckpointDesk> NewCheckpointDesk(ShardReplica* replica);
  const std::shared_ptr<CheckpointDesk> checkpoints_ = NewCheckpointDesk(&replica_);
  class SyncDesk;  // serving_sync.cc
  static std::shared_ptr<SyncDesk> NewSyncDesk();
  const std::shared_ptr<SyncDesk> sync_desk_ = NewSyncDesk();
  std::mutex backups_mu_;
  std::vector<std::shared_ptr<rpc::Client>> backup_clients_;
  std::map<std::string, std::shared_ptr<rpc::Client>> join_clients_;  // LinkTo, by address
  std::atomic<uint64_t> fetches_{0}, pushes_acked_{0}, pushes_duplicate_{0}, push_errors_{0},
      forwards_{0}, replica_method_refusals_{0}, checkpoints_offered_{0};
};

// ---------------------------------------------------------------------------------------------
// Automatic failover (docs/PS.md "Automatic failover"). A backup pings the replica it believes
// is primary every probe_interval; once that replica has been unreachable (or not primary) for
// failure_timeout, the monitor first asks the other live replicas: one that already is primary
// of that epoch or a newer one (another monitor was faster) is watched from then on, and no new
// epoch starts. Otherwise the watched replica is considered dead and the next replica in
// cluster-file order (skipping the dead) takes over: if that is this replica, it promotes itself
// to primary of epoch max(epochs seen) + 1 with every replica not known dead as a backup;
// otherwise it watches that replica instead, giving it 2 x failure_timeout (its detector runs
// on its own clock) to answer as primary. The monitor is armed only
// once it has seen the watched replica answer as primary, so a backup started before its
// primary does not take over. Limits: no quorum and no leases, so a network partition can
// leave two primaries; with more than two replicas the next replica in order may not hold the
// highest position (see docs/PS.md).

class FailoverMonitorCore {
 public:
  // Starts watching on a thread of its own. `server` must outlive the monitor.
  static Result<std::unique_ptr<FailoverMonitorCore>> Start(PsServerCore* server,
                                                            FailoverOptions options);
  ~FailoverMonitorCore();  // stops the thread

  // The epoch this replica promoted itself to, 0 while it has not.
  uint64_t promoted_epoch() const { return promoted_epoch_.load(); }

  // What the monitor believes now: the replica it watches, the epoch that replica is (or is
  // expected to become) primary of, and whether the monitor is armed (tests wait on this).
  struct WatchState {
    size_t replica = 0;
    uint64_t epoch = 0;
    bool armed = false;
  };
  WatchState watch_state() const;

 private:
  struct Primary {
    size_t replica;
    uint64_t epoch;
  };
  FailoverMonitorCore(PsServerCore* server, FailoverOptions options)
      : server_(server), options_(std::move(options)) {}
  void Run();
  void Log(const std::string& line) const;
  // Sleeps up to `d`; false when stopping.
  bool Sleep(std::chrono::milliseconds d);
  Result<PingReply> PingReplica(size_t replica) const;  // over a client of its own
  // The first live replica other than this one and `watched` that answers as primary of an
  // epoch >= min_epoch; raises *max_epoch_seen to every epoch any of them reports.
  std::optional<Primary> FindNewerPrimary(size_t watched, uint64_t min_epoch,
                                          const std::vector<bool>& dead,
                                          uint64_t* max_epoch_seen) const;
  void Publish(size_t watched, uint64_t epoch, bool armed);

  PsServerCore* server_;
  FailoverOptions options_;
  std::atomic<uint64_t> promoted_epoch_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  WatchState watch_;  // guarded by mu_
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// Failover through the shard's configuration in a KvStore (FailoverOptions::config_store;
// docs/PS.md "Configuration and leases"). Every replica runs one, the initial primary's too:
//  - it registers its incarnation; the initial primary creates the configuration (epoch 1,
//    every registered replica a member) once all replicas have registered, and takes the lease;
//  - a primary acks only while its lease is valid and drops a backup only by a committed
//    change; it steps down when the lease is lost or the store names another primary;
//  - a backup polls the store every probe_interval; once the primary's lease is gone it defers
//    (for up to one lease ttl) to a live member holding more pushes, then tries to promote
//    itself: at most one replica wins each epoch;
//  - a replica whose incarnation the configuration does not name (dropped, restarted, or a
//    deposed primary) stops serving and catches up: it installs a snapshot from the primary,
//    is sent the pushes after it, and the primary adds it to the set once it holds every
//    acknowledged push (docs/PS.md "Catch-up"). The primary serves these joins.
class LeasedFailoverCore {
 public:
  static Result<std::unique_ptr<LeasedFailoverCore>> Start(PsServerCore* server,
                                                           FailoverOptions options);
  ~LeasedFailoverCore();  // stops the thread; a held lease is revoked

  uint64_t promoted_epoch() const { return promoted_epoch_.load(); }
  // Planned handover (docs/PS.md "Planned handover"), run on the monitor's thread: this
  // primary stops taking pushes, waits until they are durable, names a backup that holds them
  // all (`to`, or the first in replica order) its successor in the store, steps down and gives
  // its lease back; the successor promotes itself at once. FailedPrecondition when this
  // replica is not the primary; on any error before the successor is named the primary goes on
  // as before.
  Result<HandoverResult> HandOver(std::optional<uint32_t> to, std::chrono::milliseconds timeout);

 private:
  LeasedFailoverCore(PsServerCore* server, FailoverOptions options, std::shared_ptr<KvStore> store);
  void Run();
  // One round of the loop; false when the monitor has nothing more to do.
  void Step();
  void TryBootstrap();
  void TryPromote(const VersionedConfig& seen);
  // Makes the server primary of `config` with a guard tied to the coordinator.
  void TakeOver(const VersionedConfig& config, const char* how);
  // Not in the set: install a snapshot from the primary of `current` and attach to it.
  void CatchUp(const VersionedConfig& current);
  // The primary's requests to change the set, run on the monitor thread, and which replica
  // each backup link of this primary reaches. Shared with the replica's guard and learners,
  // which may call it after this monitor has gone (then: Aborted).
  struct Change {
    bool add = false;
    ShardMember member;  // add: the joiner; drop: only .replica
    size_t link = 0;
    std::function<void(Status)> committed;
    std::string why;  // drop: the failed forward's error
  };
  struct Handover {
    std::optional<uint32_t> to;
    std::chrono::steady_clock::time_point deadline;
    std::function<void(Result<HandoverResult>)> done;
  };
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    bool closed = false;
    std::vector<Change> changes;
    std::vector<Handover> handovers;
    bool take_over = false;                   // ps.TakeOver arrived: step now
    std::map<size_t, uint32_t> link_replica;  // of the current primary term
    void Submit(Change change);
    void Drop(size_t link, const Status& why, std::function<void(Status)> committed);
    std::optional<size_t> LinkOf(uint32_t replica);
  };
  void RunChanges();
  // Handovers asked of this primary (handover.cc), run on the monitor thread.
  class HandoverDesk;
  void OpenHandoverDesk();  // serves ps.Handover and ps.TakeOver from now on
  void CloseHandoverDesk();
  void RunHandovers();
  Result<HandoverResult> HandOverNow(std::optional<uint32_t> to,
                                     std::chrono::steady_clock::time_point deadline);
  // The successor the store names for `seen`'s epoch (nullopt: none, or the store did not say).
  std::optional<uint32_t> NamedSuccessor(const VersionedConfig& seen);
  // The primary's side of catch-up; its methods run on RPC threads.
  class JoinDesk;
  void OpenJoinDesk();   // serves joins from now on
  void CloseJoinDesk();  // waits for a join being served
  // Whether `replica`'s process `incarnation` may join now (the primary's side).
  Status CheckJoiner(uint32_t replica, const std::string& incarnation);
  void Log(const std::string& line) const;
  void LogOnce(const std::string& line);  // suppresses repeats of the last line

  PsServerCore* server_;
  const FailoverOptions options_;
  std::shared_ptr<KvStore> store_;
  std::unique_ptr<ShardCoordinator> coordinator_;
  std::atomic<uint64_t> promoted_epoch_{0};
  // Steady-clock ns at which the last read that found this replica in the set was sent; shared
  // with the server's read gate, which may outlive this object by a fetch in flight.
  std::shared_ptr<std::atomic<int64_t>> member_confirmed_ns_ =
      std::make_shared<std::atomic<int64_t>>(0);
  uint64_t primary_epoch_ = 0;  // the epoch this replica is primary of (monitor thread)
  bool registered_ = false;
  std::string last_log_;
  // When this backup first found the primary's lease gone (for deferring to a fuller member).
  std::optional<std::chrono::steady_clock::time_point> lease_gone_since_;
  // Joiner: attached to the primary of attached_epoch_ and waiting to be added; attached_at_ is
  // when it attached or last saw its position move (forwards arriving), at attached_position_.
  std::optional<std::chrono::steady_clock::time_point> attached_at_;
  uint64_t attached_epoch_ = 0;
  ShardReplica::Position attached_position_;

  const std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();
  std::shared_ptr<JoinDesk> desk_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------

// The sharded client behind bx::ps::PsClient (include/bx/ps/client.h): one rpc::Client per shard
// for reads and one per replica for pushes.
class PsClientCore {
 public:
  static Result<std::unique_ptr<PsClientCore>> Create(const ClusterSpec& spec,
                                                      PsClientOptions options = {});
  ~PsClientCore();

  // As PsClient's. Fetches: one sub-call per shard touched, all under one deadline; reads go to
  // any replica of a shard, and to each in turn when one says it does not serve reads. Pushes: each
  // shard's part has its own PushId and is retried with it (on another replica when the one tried
  // is not primary or unreachable) until acked.
  void FetchAsync(uint32_t table, std::span<const uint64_t> keys, std::chrono::microseconds timeout,
                  std::function<void(Result<FetchResult>)> done);
  Result<FetchResult> Fetch(uint32_t table, std::span<const uint64_t> keys,
                            std::chrono::microseconds timeout);
  void FetchRowsAsync(uint32_t table, std::span<const uint64_t> keys,
                      std::chrono::microseconds timeout,
                      std::function<void(Result<FetchedRows>)> done);

  void PushAsync(uint32_t table, uint32_t dim, std::span<const uint64_t> keys,
                 std::span<const float> gradients, std::chrono::microseconds timeout,
                 std::function<void(Status)> done);
  Status Push(uint32_t table, uint32_t dim, std::span<const uint64_t> keys,
              std::span<const float> gradients, std::chrono::microseconds timeout);
  // One shard's push with a caller-chosen id (tests replay a push whose ack was lost).
  void PushToShard(uint32_t shard, PushRequest push, std::chrono::microseconds timeout,
                   std::function<void(Result<PushAck>)> done);

  // The cluster file's named tables (name, id), in its order (PsClient::TableId).
  const std::vector<std::pair<std::string, uint32_t>>& table_names() const { return table_names_; }

  // The id of the first session with every shard (PsClientOptions::client_id, or drawn).
  uint64_t client_id() const { return client_id_; }
  uint32_t shard_count() const { return static_cast<uint32_t>(shards_.size()); }

  struct Session {
    uint64_t number = 0;  // renewals so far
    uint64_t client_id = 0;
    uint64_t key = 0;
    uint64_t last_sequence = 0;
  };
  // This client's current session with `shard` (tests replay a push under it).
  Session session(uint32_t shard) const;
  PsClientStats stats() const;

 private:
  struct Shard {
    std::unique_ptr<rpc::Client> reads;                  // all replicas
    std::vector<std::unique_ptr<rpc::Client>> replicas;  // one per replica, for pushes
    std::atomic<uint32_t> primary{0};                    // where pushes go first
    // This client's session with the shard (PushId, docs/PS.md "Exactly once"): renewed when
    // the shard says it no longer knows it.
    mutable std::mutex session_mu;
    Session session;
    // Appended to "push not acknowledged in time" when the cluster file configures no failover
    // for this shard, saying how to turn it on (empty when it does).
    std::string no_failover_hint;
  };
  struct PushAttempt;
  struct FetchJoin;
  class Timer;
  PsClientCore() = default;
  // session: the shard session the push was stamped from (renewable), or none (caller's id).
  void StartPush(uint32_t shard, PushRequest push, std::chrono::microseconds timeout,
                 std::optional<uint64_t> session, std::function<void(Result<PushAck>)> done);
  void TryPush(std::shared_ptr<PushAttempt> attempt);
  // The shard answered `attempt` with session_expired: moves it to a new session (started
  // once per expired one), or fails it when an earlier attempt may have been applied.
  void RenewSessionAndRetry(std::shared_ptr<PushAttempt> attempt, uint32_t min_generation);
  // Stamps `push` with the shard's session: its id, key and next sequence.
  void StampPush(Shard& shard, PushRequest* push, uint64_t* session_number);
  void StartFetch(uint32_t table, std::span<const uint64_t> keys, std::chrono::microseconds timeout,
                  std::shared_ptr<FetchJoin> join);
  void FetchFromShard(uint32_t table, std::shared_ptr<FetchJoin> join, size_t batch,
                      rpc::Clock::time_point deadline, uint32_t attempt);

  uint64_t client_id_ = 0;
  // rpc.slowest_transfer_bytes_per_second: a push attempt's time grows with its bytes.
  size_t slowest_bytes_per_second_ = 0;
  // The cluster file's tables' dims (a trainer's copy may list none): a fetch tells the RPC
  // client how large its reply will be, so a connection awaiting hundreds of MiB is not taken
  // for dead (rpc::CallOptions::expected_response_bytes).
  std::map<uint32_t, uint32_t> table_dims_;
  std::vector<std::pair<std::string, uint32_t>> table_names_;  // named tables, in file order
  std::vector<std::unique_ptr<Shard>> shards_;
  std::unique_ptr<Timer> timer_;
  std::atomic<uint64_t> push_failovers_{0};
  std::atomic<uint64_t> session_renewals_{0};
};

}  // namespace bx::ps
