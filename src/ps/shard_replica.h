// ShardReplica: one replica of one shard, and the primary-backup protocol that keeps the
// replicas of a shard identical and applies every push exactly once. No transport in here: the
// RPC service calls HandlePush / HandleForward / Fetch, and the primary reaches its backups
// through BackupLink. Protocol: docs/PS.md "Replication".
//
//  - Primary: a client push is checked against the dedup record; a new push is applied, given
//    the next lsn of the primary's epoch, kept in a bounded log, and forwarded to every live
//    backup in lsn order. The client's ack is sent when every live backup has it (durable). A
//    retried push (duplicate id) is acked once everything applied so far is durable, so an ack
//    never precedes the replication of the push it acknowledges.
//  - Backup: forwarded pushes are applied in lsn order (out-of-order arrivals wait), deduplicated
//    by push id like client pushes, and appended to the same bounded log.
//  - Failover: whoever detects the primary's death promotes the live replica with the highest
//    position() (epoch, then lsn) with BecomePrimary(new epoch, links). Backups apply in lsn
//    order, so that replica holds everything any other survivor holds. It re-forwards its log
//    (everything the old primary may not have made durable) in the new epoch, so every backup
//    ends up with every push any survivor applied; backups skip the ones they have by push id.
//  - Fencing: a backup refuses forwards from an older epoch; the primary that gets that refusal
//    steps down (Role::kFenced), failing its waiting pushes with Unavailable, so a deposed
//    primary cannot acknowledge anything. With a guard it first asks the store to drop that
//    backup, and steps down when the store refuses (it names another primary).
//  - Catch-up: a replica outside the set (restarted, or dropped) installs a snapshot the primary
//    took for it (SnapshotForJoin, InstallSnapshot); the primary then forwards it the pushes
//    after the snapshot and every new one (AttachLearner). It counts towards durability only
//    once it has caught up, and joins the set only by a committed change once it holds every
//    push acknowledged so far (docs/PS.md "Catch-up").
//  - Configuration (PrimaryGuard): with a guard, a backup whose forward fails still counts
//    towards durability until the configuration store has committed its removal, and the
//    primary acks only while its lease is valid (and holds its acks while the store does not
//    answer). Without one, a failed backup is dropped at
//    once — the behaviour that splits a shard when the primary was only slow; it is
//    kept for the in-process cases that have no store and as the tests' control.
//
// Thread-safety: every method may be called from any thread. Pushes, forwards, promotion and
// Save are serialised by one lock (one order of application per shard, which is what makes the
// replicas bitwise identical); Fetch runs concurrently with all of them under the tables'
// stripe locks. Callbacks run on the calling thread or the thread that completes a forward,
// never under a lock of this class, so they may call back into it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <vector>

#include "bx/status.h"
#include "ps/shard_state.h"
#include "ps/wire.h"

namespace bx::ps {

// The primary's connection to one backup.
class BackupLink {
 public:
  virtual ~BackupLink() = default;
  // Delivers `push`, the primary's lsn-th of `epoch`, to the backup (whose service calls
  // HandleForward); `push` is the primary's log entry, read only during the call. `done` runs
  // exactly once, on any thread (also inside Forward): OK when the backup holds the push;
  // FailedPrecondition when the backup refused it for a stale epoch (this primary was
  // deposed); any other error when the backup is unreachable (it is then dropped from the live
  // backups; bringing it back takes a snapshot). Called in lsn order for one link.
  virtual void Forward(uint64_t epoch, uint64_t lsn, const PushRequest& push,
                       std::function<void(Status)> done) = 0;
};

class ShardReplica {
 public:
  // Epochs above this are refused (a promotion to one, a forward from one): no cluster gets near
  // it honestly, and every successor epoch, max seen + 1, then fits in 64 bits.
  static constexpr uint64_t kMaxEpoch = uint64_t{1} << 62;

  enum class Role {
    kBackup,   // applies forwarded pushes; refuses client pushes
    kPrimary,  // applies client pushes and forwards them
    kFenced,   // a deposed primary: may hold pushes nobody else has; rebuild from a snapshot
  };
  // "backup", "primary" or "fenced" (metrics labels, ps.Stat, logs).
  static std::string_view RoleName(Role role);

  struct Options {
    PushDedup::Options dedup;
    // The primary refuses a push (ResourceExhausted, retry later) while this many are applied
    // but not durable, and every replica keeps its last `max_undurable_pushes` applied pushes
    // for re-forwarding when promoted. Equal bounds are what make the re-forward complete: a
    // push some survivor lacks was one of the old primary's last undurable ones.
    size_t max_undurable_pushes = 1024;
    // The same bound in bytes (keys and gradients): the primary refuses a push while this many
    // bytes are applied but not durable, and every replica keeps the shortest suffix of its log
    // that could hold them (so a log holds at most this plus its newest push). A push larger
    // than the bound is still taken when nothing else is undurable.
    size_t max_undurable_bytes = size_t{128} << 20;
    // Out-of-order forwards a backup holds while waiting for a gap to fill.
    size_t max_reordered_forwards = 4096;
    // Pushes, and their bytes (keys and gradients), a primary keeps in its log for a joining
    // replica between its snapshot and its attach; a join that falls further behind must take
    // a new snapshot. Moving and installing a 1 GiB snapshot takes 20-40 s on a busy 2-core
    // host, while trainers push 2,000-4,000 small pushes a second: 65,536 made every such
    // join start again (3 snapshots for one join).
    size_t max_catch_up_pushes = 262144;
    // (Well below the receiving server's request queue bound, 256 MiB by default: the backlog
    // is forwarded at once.)
    size_t max_catch_up_bytes = size_t{64} << 20;
    // Replicas, the primary counted, that must hold a push before it is acknowledged (Kafka's
    // min.insync.replicas). A backup counts while it is a member that has not been dropped, or
    // a learner that has caught up. Below it the primary refuses pushes, new ones and retries
    // alike (ResourceExhausted, nothing applied), and fails the pushes waiting for an ack the
    // same way: it never acknowledges alone what one crash would lose. 1: acknowledge on
    // whatever backups are left (availability over durability).
    size_t min_in_sync = 1;
    // The clock a primary stamps pushes with when its shard has tables that expire rows, in ms
    // since the Unix epoch (tests set their own); null: the system clock. Backups never read
    // theirs: they use the stamps.
    std::function<uint64_t()> clock_ms;

    // ---- Serving sync (docs/PS.md "Serving sync") ----
    // A serving replica that follows a training cluster: client pushes are refused
    // (InvalidArgument: train on the training cluster), only its follower's sync records are
    // applied, and fetches take the sync lock shared so that none sees part of a sync.
    bool follower = false;
    // The control for the test that a fetch never sees a shard half-synced: false applies a
    // sync row by row with no lock around it (and yields between rows). Never false in service.
    bool sync_visible_whole = true;
    // Keys a training primary remembers having evicted (tombstones), for followers' deltas; a
    // follower whose position is older than the oldest one kept gets a full copy instead.
    size_t max_sync_tombstones = size_t{1} << 20;
  };

  struct Position {
    uint64_t epoch = 0;
    uint64_t lsn = 0;
    friend auto operator<=>(const Position&, const Position&) = default;
  };

  using PushDone = std::function<void(Result<PushAck>)>;
  using ForwardDone = std::function<void(Status)>;

  // What a primary needs from its shard's committed configuration (docs/PS.md "Configuration
  // and leases").
  struct PrimaryGuard {
    // Asks the store to drop backup `index` (into BecomePrimary's links) from the replica set.
    // `committed` runs once, on any thread: OK once the removal is committed — only then does
    // the backup stop counting towards durability — or an error when it cannot be (this
    // primary was replaced, or lost its lease), which makes the primary step down.
    // `why`: the failed forward's error, for the store's log.
    std::function<void(size_t index, const Status& why, std::function<void(Status)> committed)>
        drop_backup;
    // True while the primary's lease is certainly still valid at the store. Checked before
    // every push is accepted and every ack is released: while false, the primary refuses
    // pushes (nothing applied) and holds its acks, until LeaseConfirmed (the store renewed the
    // lease) or StepDown (the store says it is gone).
    std::function<bool()> lease_valid;
  };

  struct JoinSnapshot {
    Position position;             // of the snapshot: the joiner continues at position.lsn + 1
    std::vector<std::byte> bytes;  // ShardState::Encode
  };
  // Commits a caught-up learner (link `index`) into the configuration; `committed` runs once,
  // on any thread, with OK once the change is committed, or an error (the primary then steps
  // down: the outcome of a failed commit may be unknown).
  using AddMember = std::function<void(size_t index, std::function<void(Status)> committed)>;

  // Starts as a backup at epoch 0 with empty tables.
  ShardReplica() : ShardReplica(std::make_unique<ShardState>(), Options{}) {}
  explicit ShardReplica(Options options)
      : ShardReplica(std::make_unique<ShardState>(options.dedup), options) {}
  // Starts as a backup over existing state (e.g. ShardState::Load), at its saved position.
  ShardReplica(std::unique_ptr<ShardState> state, Options options);
  ~ShardReplica();

  Status CreateTable(const TableConfig& config) { return state_->CreateTable(config); }

  // Makes this replica the primary of `epoch` (greater than any epoch it has seen) with these
  // live backups, and re-forwards its log to them. Pushes are accepted at once; acks wait for
  // the re-forwarded log to be durable. Without a guard a failed backup is dropped at once.
  Status BecomePrimary(uint64_t epoch, std::vector<std::shared_ptr<BackupLink>> backups,
                       PrimaryGuard guard = {});

  // Takes this replica out of service: it becomes kFenced (refuses pushes and forwards) and a
  // primary fails its waiting pushes with Unavailable(reason). For a primary whose lease the
  // store says is gone or whom it no longer names, and a backup the configuration no longer
  // holds.
  void StepDown(const std::string& reason);
  // StepDown for a primary whose lease the store says is gone; any other role is left as it is.
  // The notice comes from the lease's keep-alive thread and may arrive after the failover
  // monitor already rebuilt this replica as a backup of the new epoch (both act when the store
  // comes back): fencing that backup made its primary drop it, and it sat out four leases.
  void StepDownIfPrimary(const std::string& reason);

  // A client push. `done` gets the ack (duplicate = true for a retry of an applied push) once
  // the push is on every live backup, or an error: FailedPrecondition (not primary: ask
  // another replica), ResourceExhausted (too many outstanding: retry later), Unavailable
  // (deposed while waiting: retry at the new primary), NotFound/InvalidArgument (bad push;
  // nothing applied).
  void HandlePush(PushRequest push, PushDone done);

  // A push forwarded by the primary. `done` gets OK once it is applied here (or was already),
  // FailedPrecondition for a stale epoch, or another error.
  void HandleForward(ForwardedPush forwarded, ForwardDone done);

  // The configuration store names epoch `epoch`: forwards from older epochs are refused from
  // now on, even before the new primary's first forward arrives (a deposed primary may still
  // be sending). Never lowers the bar.
  void RefuseEpochsBelow(uint64_t epoch);
  // Whether the configuration store has committed `epoch` for this shard (its configuration is
  // at `epoch` or later); an error when the store cannot say. With a check set, a forward from
  // an epoch newer than this replica's is refused unless the store committed it: a forward
  // from an epoch nobody committed (a stale or buggy replica, or one holding the replica secret
  // and forging) fenced the real primary and stalled its shard. Without one (the lease-less
  // control) any epoch up to kMaxEpoch is taken on trust. Set by the failover monitor; null
  // clears it (the check must not outlive what it reads).
  using EpochCommitted = std::function<Result<bool>(uint64_t epoch)>;
  void SetEpochCheck(EpochCommitted check);

  // ---- Catch-up (docs/PS.md "Catch-up") ----
  // Primary with a valid lease: a snapshot of this replica for `joiner` (an id of the caller's
  // choosing; a new snapshot for the same joiner replaces its last). The pushes after it stay
  // in the log, up to max_catch_up_pushes, until AttachLearner. Pushes wait while the state is
  // copied (memory speed), not while the copy is encoded. Encoded at `version`, the newest the
  // joiner reads: FailedPrecondition, before anything is copied, when the state needs a newer
  // one (ShardState::CheckEncodable).
  Result<JoinSnapshot> SnapshotForJoin(uint32_t joiner,
                                       uint32_t version = ShardState::kSnapshotVersions.newest);
  // Primary: `joiner` installed its snapshot and `link` reaches it. Forwards it every push
  // after the snapshot, then every new one; it counts towards durability once it has acked
  // the pushes issued before the attach, and `add` is called once it holds every push
  // issued before it started counting. FailedPrecondition when this replica is no longer the
  // primary that took the snapshot or the log has moved past it (take a new one).
  Status AttachLearner(uint32_t joiner, std::shared_ptr<BackupLink> link, AddMember add);
  // Not a primary: replaces this replica's state with a primary's JoinSnapshot bytes and
  // follows its epoch as a backup from its position on. Concurrent fetches stay safe. On error
  // (a corrupt snapshot, one from an epoch the store has left) the replica is left kFenced.
  Status InstallSnapshot(std::span<const std::byte> snapshot);
  // Primary: backup link `index` is known to be gone (its process was replaced); handled as a
  // failed forward.
  void ReportBackupFailed(size_t index);

  // Fetches from any role. `out` is dim * keys.size() floats' worth of bytes (e.g.
  // FetchResponseValues of a response buffer).
  Status Fetch(uint32_t table_id, std::span<const uint64_t> keys, std::span<std::byte> out) const;
  // Calls fn for every table, in id order (their rows may change meanwhile).
  void ForEachTable(const std::function<void(const Table&)>& fn) const;
  // The dim of a table, to size a fetch response (NotFound if absent).
  Result<uint32_t> TableDim(uint32_t table_id) const;
  // Encodes a whole fetch response for `request` into `out`, which must be exactly
  // FetchResponseSize(request.keys.size(), dim) bytes: values are written in place.
  Status EncodeFetchResponse(const FetchRequest& request, std::span<std::byte> out) const;

  // ---- Checkpoints (docs/PS.md "Checkpoints") ----
  // Primary with a valid lease: the shard's state at its newest applied position, returned
  // once every push up to that position is durable (on min_in_sync replicas), so a checkpoint
  // holds no push that a failover could still take back. Pushes wait only while the state is
  // copied. DeadlineExceeded when the position is not durable within `timeout`; Unavailable
  // or ResourceExhausted when the replica is deposed or falls below min_in_sync meanwhile.
  Result<JoinSnapshot> SnapshotForCheckpoint(std::chrono::milliseconds timeout);

  // ---- Serving sync (docs/PS.md "Serving sync") ----
  // Primary: what brings a follower at `since` (a position of this shard it synced before;
  // {0, 0} at first) to this replica's newest applied position: every row stored by a push
  // after `since` and every key evicted after it, or (SyncBatch::full) a copy of every row when
  // `since` is of another epoch or older than the tombstones kept. Pushes wait while it is
  // copied (memory speed). FailedPrecondition when not primary.
  Result<SyncBatch> ChangesSince(Position since);
  // The training position this serving replica holds (ShardState::Synced), as of its last
  // applied sync record; asked_at_ms 0 when it has none.
  ShardState::Synced synced() const;
  // Sync records applied here (by any role), and of those full copies.
  uint64_t syncs_applied() const { return syncs_applied_.load(std::memory_order_relaxed); }
  uint64_t sync_full_copies() const { return sync_full_copies_.load(std::memory_order_relaxed); }
  bool follower() const { return options_.follower; }

  // ---- Planned handover (docs/PS.md "Planned handover") ----
  // Primary with a valid lease: refuses every push from now on (FailedPrecondition, nothing
  // applied: clients move on to another replica) and returns the newest applied position once
  // it is durable, so every backup in sync holds the whole shard. DeadlineExceeded when it is
  // not within `timeout`, FailedPrecondition when this is not a primary with its lease; on any
  // error pushes are taken again.
  Result<Position> BeginHandover(std::chrono::milliseconds timeout);
  // Takes pushes again (the handover could not be finished).
  void EndHandover();

  // A new replica (a backup at epoch 0 that has applied nothing) takes `restored`'s rows: a
  // cluster started from a checkpoint. Every table of `restored` must exist here with the
  // same config (the cluster file's); tables only here stay empty. The position stays 0: the
  // new cluster's epochs start again.
  Status Restore(ShardState& restored);

  // Saves tables, dedup record and position (pushes wait meanwhile; fetches go on).
  Status Save(const std::string& path);

  Role role() const;
  // A primary whose guard's lease is valid now (or that has no guard). False for every other
  // role.
  bool PrimaryWithLease();
  // The guard's lease is valid again after it lapsed (the store renewed it): releases the acks
  // held back meanwhile.
  void LeaseConfirmed();
  Position position() const;
  // Live backups of a primary (backups dropped after a failed forward are not counted).
  size_t live_backups() const;
  // A primary's replicas that count towards min_in_sync, itself included (0 for other roles).
  size_t in_sync_replicas() const;
  // Pushes (new and retried) refused, and waiting pushes failed, for want of min_in_sync.
  uint64_t below_min_in_sync_refusals() const;
  // Pushes refused because the shard did not know their session (evicted, or another key).
  uint64_t session_refusals() const { return session_refusals_.load(std::memory_order_relaxed); }
  // The dedup record's clients, and clients it has evicted, as of the last applied push.
  uint64_t dedup_clients() const { return dedup_clients_.load(std::memory_order_relaxed); }
  uint64_t dedup_evictions() const { return dedup_evictions_.load(std::memory_order_relaxed); }
  const ShardState& state() const { return *state_; }
  // Bytes (keys and gradients) of the pushes this replica keeps for re-forwarding and joiners.
  size_t log_bytes() const;

 private:
  struct Waiter {
    PushAck ack;
    PushDone done;
  };
  // All below: order_mu_ held.
  void ForwardLocked(const PushRequest& push, uint64_t lsn);
  // OK when `epoch` needs no check (no newer than this replica's, or not above the epochs it
  // refuses below, which the store has committed) or the store has committed it; then epochs
  // below it are refused too.
  Status CheckEpochCommittedLocked(uint64_t epoch);
  // Both take the push into the log (moved, not copied: pushes are up to 64 MiB).
  void ApplyForwardLocked(ForwardedPush&& forwarded, Status* result);
  void AppendLogLocked(PushRequest&& push);
  // A push stamp: options_.clock_ms, or the system clock.
  uint64_t StampNow() const;
  // Applies a push or sync record as the `lsn`-th of this epoch: stamps its rows, records a
  // primary's evictions as tombstones, and holds fetches out of a sync (options_.follower).
  Status ApplyLocked(const PushRequest& push, uint64_t lsn);
  // InvalidArgument for a new session whose generation is implausibly far ahead.
  Status CheckNewSession(uint64_t client_id, uint64_t min_generation) const;
  // Mirrors the dedup record's size into the atomics the metrics read.
  void PublishDedupLocked();
  // Moves a learner on once it has acked far enough: to counting, then to being added.
  // mu_ held.
  void AdvanceLearnerLocked(size_t backup, std::vector<std::function<void()>>* calls);
  // The store answered AddMember for learner `backup` of `epoch`.
  void OnJoinCommitted(uint64_t epoch, size_t backup, const Status& status);
  // Leaves the primary role; waiting pushes fail with `reason` (their callbacks go to *calls).
  // mu_ held.
  void StepDownLocked(Role role, const Status& reason, std::vector<std::function<void()>>* calls);
  // StepDown and StepDownIfPrimary.
  void Fence(const std::string& reason, bool only_a_primary);
  void AddWaiterLocked(uint64_t lsn, Waiter waiter);
  // OK once `lsn` is durable, or the error a push waiting for it would get (checkpoints and
  // handovers wait on it). order_mu_ held.
  std::future<Status> DurableFutureLocked(uint64_t lsn);

  // Forward completion: mu_ only. Inside this replica's order section (a forward completing
  // within Forward) its callbacks are deferred to RunDeferred.
  void OnForwardDone(uint64_t epoch, uint64_t lsn, size_t backup, Status status);
  // The backup with this bit no longer counts towards durability. mu_ held.
  void ForgetBackupLocked(uint64_t bit);
  // A member's link failed: with a guard, asks the store to drop it (it counts until the
  // answer); without one, forgets it at once. mu_ held.
  void MemberLinkFailedLocked(size_t backup, const Status& why,
                              std::vector<std::function<void()>>* calls);
  // The store refused or did not answer a change this primary asked for (`what`): steps down.
  // mu_ held.
  void CommitFailedLocked(const char* what, const Status& status,
                          std::vector<std::function<void()>>* calls);
  // The store answered a drop_backup request of `epoch`.
  void OnDropCommitted(uint64_t epoch, size_t backup, const Status& status);
  // Hands `calls` to RunDeferred when this thread is inside this replica's order section, so
  // they never run under order_mu_. mu_ held.
  void DeferIfOrderedLocked(std::vector<std::function<void()>>* calls);
  // False while a guard says the lease is not valid now. mu_ held.
  bool LeaseHeldLocked() const;
  // Collects waiters whose lsn is durable; fails them all when fewer than min_in_sync replicas
  // are in sync. mu_ held.
  void CollectReadyLocked(std::vector<std::function<void()>>* out);
  // The primary and the backups that count towards min_in_sync. mu_ held.
  size_t InSyncLocked() const;
  // ResourceExhausted naming the shortfall (counted as a refusal). mu_ held.
  Status BelowMinInSyncLocked(size_t in_sync, const char* what);
  uint64_t DurableLsnLocked() const;
  // Bytes (keys and gradients) in the log, and in its pushes after `lsn` (the undurable ones
  // when `lsn` is durable). order_mu_ held.
  uint64_t LogBytesLocked() const;
  uint64_t LogBytesAfterLocked(uint64_t lsn) const;
  // Ends an order_mu_ section: runs the callbacks deferred while it held the lock.
  void RunDeferred();
  // The state of a primary with a valid lease, copied while pushes wait (order_mu_ taken here)
  // and encoded after they resume; `pin` runs with the copy's position inside the same order
  // section (a joiner's pin, a checkpoint's durability wait). FailedPrecondition otherwise.
  Result<JoinSnapshot> CopyAndEncodeAsPrimary(
      const std::function<void(const Position&)>& pin,
      uint32_t version = ShardState::kSnapshotVersions.newest);

  const Options options_;
  std::unique_ptr<ShardState> state_;

  // order_mu_ serialises application (pushes, forwards, promotion, save); it is taken before
  // mu_ when both are needed, never after, and only through OrderSection (shard_replica.cc),
  // which tells OnForwardDone whether the current thread holds it.
  mutable std::mutex order_mu_;
  Role role_ = Role::kBackup;  // written under both locks; read under either
  // Applied pushes, oldest first; `start` is log_appended_ before the push was appended, so
  // the pushes from one to the newest hold log_appended_ minus its `start` bytes.
  struct LogEntry {
    PushRequest push;
    uint64_t start = 0;
  };
  std::deque<LogEntry> log_;
  uint64_t log_appended_ = 0;  // keys and gradients ever appended to log_
  // RefuseEpochsBelow, a snapshot's epoch, or one the epoch check confirmed: all committed.
  uint64_t min_forward_epoch_ = 0;
  EpochCommitted epoch_check_;  // SetEpochCheck; order_mu_
  bool handing_over_ = false;   // BeginHandover: pushes refused; order_mu_
  // Backup: forwards of the current epoch that arrived ahead of a gap, by lsn.
  std::map<uint64_t, std::pair<ForwardedPush, std::vector<ForwardDone>>> reordered_;
  // Primary: position of each joiner's snapshot, whose log suffix is kept for its attach.
  std::map<uint32_t, Position> join_pins_;

  // mu_ guards the primary's replication progress.
  mutable std::mutex mu_;
  uint64_t epoch_ = 0;       // mirror of state_->epoch for forward completions
  uint64_t issued_lsn_ = 0;  // mirror of state_->applied_lsn on the primary
  std::vector<std::shared_ptr<BackupLink>> backups_;
  uint64_t dead_backups_ = 0;      // bit i: backups_[i] failed and no longer counts
  uint64_t dropping_backups_ = 0;  // bit i: failed, its removal not yet committed (still owed)
  PrimaryGuard guard_;
  std::map<uint64_t, uint64_t> owed_;        // lsn -> bitmask of backups that have not acked
  std::multimap<uint64_t, Waiter> waiters_;  // by the lsn that must be durable
  // Backups attached by AttachLearner and not yet committed members, by link index.
  struct Learner {
    uint64_t acked = 0;   // highest lsn it acked (it applies in order: all below too)
    uint64_t target = 0;  // the lsn it must ack before its next step
    bool adding = false;  // AddMember called, not answered
    bool failed = false;  // its link failed while adding (dropped if the add commits)
    AddMember add;
    Status failure;  // how its link failed
  };
  std::map<size_t, Learner> learners_;
  uint64_t catching_up_ = 0;  // bit i: learner i is sent pushes but does not count yet
  std::atomic<uint64_t> below_min_refusals_{0};
  std::atomic<uint64_t> session_refusals_{0};
  std::atomic<uint64_t> dedup_clients_{0};
  std::atomic<uint64_t> dedup_evictions_{0};
  // Serving sync. Fetches on a follower hold sync_mu_ shared; applying a sync record holds it
  // exclusively, so a fetch sees a shard before or after a sync, never in between.
  mutable std::shared_mutex sync_mu_;
  // A primary's evictions of this epoch, oldest first (order_mu_): keys evicted at lsns after
  // tombstones_from_ are all here.
  struct Tombstone {
    uint64_t lsn;
    uint32_t table;
    uint64_t key;
  };
  std::deque<Tombstone> tombstones_;
  uint64_t tombstones_from_ = 0;
  std::atomic<uint64_t> syncs_applied_{0};
  std::atomic<uint64_t> sync_full_copies_{0};
  // Callbacks that became due inside an order section, for RunDeferred.
  std::vector<std::function<void()>> deferred_;
};

}  // namespace bx::ps
