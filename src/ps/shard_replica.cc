#include "ps/shard_replica.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <utility>

namespace bx::ps {
namespace {

constexpr size_t kMaxBackups = 64;  // the owed-acks bitmask is one uint64_t

// The replica whose order_mu_ this thread holds (innermost, as a primary's Forward may run a
// backup's HandleForward inline). Thread-local, unlike a member naming the holding thread, which
// a thread leaving its section could clear after the next holder had set it.
thread_local const ShardReplica* order_holder = nullptr;

// An order_mu_ section: marks it for OnForwardDone while the lock is held.
class OrderSection {
 public:
  OrderSection(std::mutex& mu, const ShardReplica* replica)
      : lock_(mu), outer_(std::exchange(order_holder, replica)) {}
  ~OrderSection() { order_holder = outer_; }  // runs before lock_ unlocks
  OrderSection(const OrderSection&) = delete;
  OrderSection& operator=(const OrderSection&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
  const ShardReplica* const outer_;
};

Status NotPrimary(ShardReplica::Role role) {
  return FailedPrecondition(role == ShardReplica::Role::kFenced
                                ? "replica was deposed as primary; retry at the new primary"
                                : "replica is not the primary of its shard");
}

}  // namespace

ShardReplica::ShardReplica(std::unique_ptr<ShardState> state, Options options)
    : options_(options), state_(std::move(state)) {
  epoch_ = state_->epoch;
  PublishDedupLocked();
}

// Outstanding pushes' callbacks are dropped unrun. Links must be shut down first: a forward
// completing after destruction would touch a dead object.
ShardReplica::~ShardReplica() = default;

// ---- Primary ---------------------------------------------------------------------------------

Status ShardReplica::BecomePrimary(uint64_t epoch, std::vector<std::shared_ptr<BackupLink>> backups,
                                   PrimaryGuard guard) {
  if (backups.size() > kMaxBackups) {
    return InvalidArgument("at most " + std::to_string(kMaxBackups) + " backups per shard");
  }
  std::vector<std::function<void()>> calls;
  {
    OrderSection order(order_mu_, this);
    if (epoch > kMaxEpoch) {
      return InvalidArgument("promotion to epoch " + std::to_string(epoch) + ", above the limit " +
                             std::to_string(kMaxEpoch));
    }
    if (epoch <= state_->epoch) {
      return FailedPrecondition("promotion to epoch " + std::to_string(epoch) +
                                " but this replica has seen epoch " +
                                std::to_string(state_->epoch));
    }
    for (auto& [lsn, entry] : reordered_) {
      for (ForwardDone& done : entry.second) {
        calls.push_back([d = std::move(done)] { d(FailedPrecondition("epoch ended")); });
      }
    }
    reordered_.clear();
    handing_over_ = false;
    state_->epoch = epoch;
    state_->applied_lsn = 0;
    {
      std::lock_guard lock(mu_);
      role_ = Role::kPrimary;
      epoch_ = epoch;
      issued_lsn_ = 0;
      backups_ = std::move(backups);
      dead_backups_ = 0;
      dropping_backups_ = 0;
      learners_.clear();
      catching_up_ = 0;
      guard_ = std::move(guard);
      owed_.clear();
    }
    join_pins_.clear();
    tombstones_.clear();  // of the old epoch: a follower of this one starts with a full copy
    tombstones_from_ = 0;
    // Re-forward the log in the new epoch: a backup may lack pushes the old primary had not
    // made durable; the ones it has are skipped there by push id.
    for (const LogEntry& entry : log_) ForwardLocked(entry.push, ++state_->applied_lsn);
  }
  RunDeferred();
  for (auto& call : calls) call();
  return Status::Ok();
}

void ShardReplica::HandlePush(PushRequest push, PushDone done) {
  Status refused;
  std::optional<PushAck> expired;
  {
    OrderSection order(order_mu_, this);
    Role role;
    uint64_t durable;
    uint64_t undurable;
    Status in_sync_refusal;
    bool lease_held;
    {
      std::lock_guard lock(mu_);
      role = role_;
      lease_held = LeaseHeldLocked();
      durable = DurableLsnLocked();
      undurable = issued_lsn_ - durable;
      if (const size_t in_sync = InSyncLocked();
          role_ == Role::kPrimary && in_sync < options_.min_in_sync) {
        in_sync_refusal = BelowMinInSyncLocked(in_sync, "push refused, nothing applied");
      }
    }
    const PushAck ack{push.id, false};
    if (options_.follower && !push.sync) {
      refused = InvalidArgument(
          "this cluster serves a training cluster's rows (bx ps serve --follow) and takes no "
          "pushes: push to the training cluster");
    } else if (!options_.follower && push.sync) {
      refused = InvalidArgument("a sync record for a replica that follows no training cluster");
    } else if (role != Role::kPrimary) {
      refused = NotPrimary(role);
    } else if (handing_over_) {
      refused = FailedPrecondition(
          "the primary is handing its shard over to a backup; retry at the new primary");
    } else if (!lease_held) {
      refused = FailedPrecondition(
          "the primary's lease is unconfirmed (its store has not answered); retry");
    } else if (!in_sync_refusal.ok()) {
      refused = in_sync_refusal;
    } else {
      PushDedup& dedup = state_->dedup();
      switch (dedup.Check(push.id, push.client_key)) {
        case PushDedup::Verdict::kTooFarAhead:
          refused = ResourceExhausted("push " + std::to_string(push.id.sequence) +
                                      " is beyond the client's dedup window");
          break;
        case PushDedup::Verdict::kRecordFull:
          refused = ResourceExhausted(
              "the dedup record holds its bound of out-of-order pushes; "
              "retry later");
          break;
        case PushDedup::Verdict::kExpired:
        case PushDedup::Verdict::kWrongKey:
          // Not applied: the client must start a new session (PushAck::session_expired).
          session_refusals_.fetch_add(1, std::memory_order_relaxed);
          expired = PushAck{.id = push.id,
                            .session_expired = true,
                            .min_generation = static_cast<uint32_t>(
                                std::min<uint64_t>(dedup.min_generation(), UINT32_MAX))};
          break;
        case PushDedup::Verdict::kDuplicate:
          // Applied before, maybe in an earlier epoch or not yet durable: ack once everything
          // applied so far is on every live backup.
          AddWaiterLocked(state_->applied_lsn, Waiter{PushAck{push.id, true}, std::move(done)});
          break;
        case PushDedup::Verdict::kNew: {
          if (!dedup.Knows(push.id.client_id)) {
            refused = CheckNewSession(push.id.client_id, dedup.min_generation());
            if (!refused.ok()) break;
          }
          if (undurable >= options_.max_undurable_pushes) {
            refused = ResourceExhausted("too many pushes awaiting backups; retry later");
            break;
          }
          if (LogBytesAfterLocked(durable) >= options_.max_undurable_bytes) {
            refused = ResourceExhausted("too many bytes of pushes awaiting backups; retry later");
            break;
          }
          refused = state_->ValidatePush(push);
          if (!refused.ok()) break;
          if (state_->has_ttl_tables()) push.stamp_ms = StampNow();
          // Validated above; refused if the update is non-finite.
          refused = ApplyLocked(push, state_->applied_lsn + 1);
          if (!refused.ok()) break;
          dedup.MarkApplied(push.id, push.client_key);
          PublishDedupLocked();
          const uint64_t lsn = ++state_->applied_lsn;
          AppendLogLocked(std::move(push));
          AddWaiterLocked(lsn, Waiter{ack, std::move(done)});
          ForwardLocked(log_.back().push, lsn);
          break;
        }
      }
    }
  }
  RunDeferred();
  if (!refused.ok()) {
    done(refused);
  } else if (expired) {
    done(*expired);
  }
}

uint64_t ShardReplica::StampNow() const {
  if (options_.clock_ms) return options_.clock_ms();
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

Status ShardReplica::CheckNewSession(uint64_t client_id, uint64_t min_generation) const {
  // A generation far in the future, once evicted, would raise min_generation out of every
  // honest client's reach; a day of clock skew is generous.
  const uint64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const uint64_t limit = std::max(now, min_generation) + 86400;
  if (PushDedup::Generation(client_id) > limit) {
    return InvalidArgument("client id " + std::to_string(client_id) + ": its generation (upper " +
                           "32 bits) " + std::to_string(PushDedup::Generation(client_id)) +
                           " is more than a day ahead of this shard's clock");
  }
  return Status::Ok();
}

void ShardReplica::PublishDedupLocked() {
  const PushDedup& dedup = state_->dedup();
  dedup_clients_.store(dedup.client_count(), std::memory_order_relaxed);
  dedup_evictions_.store(dedup.evictions(), std::memory_order_relaxed);
}

namespace {
size_t PayloadBytes(const PushRequest& push) {
  if (push.sync) return SyncBatchPayloadBytes(*push.sync);
  return push.keys.size() * sizeof(uint64_t) + push.gradients.size() * sizeof(float);
}
}  // namespace

Status ShardReplica::ApplyLocked(const PushRequest& push, uint64_t lsn) {
  if (push.sync) {
    std::unique_lock<std::shared_mutex> whole;
    if (options_.sync_visible_whole) whole = std::unique_lock(sync_mu_);
    BX_RETURN_IF_ERROR(state_->ApplyPush(push, lsn, nullptr, !options_.sync_visible_whole));
    syncs_applied_.fetch_add(1, std::memory_order_relaxed);
    if (push.sync->full) sync_full_copies_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  // Only a primary's evictions can serve a follower (its deltas are of the primary's epoch).
  if (role() != Role::kPrimary) return state_->ApplyPush(push, lsn);
  std::vector<std::pair<uint32_t, uint64_t>> evicted;
  BX_RETURN_IF_ERROR(state_->ApplyPush(push, lsn, &evicted));
  for (const auto& [table, key] : evicted) tombstones_.push_back(Tombstone{lsn, table, key});
  while (tombstones_.size() > options_.max_sync_tombstones) {
    tombstones_from_ = tombstones_.front().lsn;
    tombstones_.pop_front();
  }
  return Status::Ok();
}

Result<SyncBatch> ShardReplica::ChangesSince(Position since) {
  OrderSection order(order_mu_, this);
  if (role() != Role::kPrimary) return NotPrimary(role());
  SyncBatch batch;
  batch.source_epoch = state_->epoch;
  batch.source_lsn = state_->applied_lsn;
  batch.full = since.epoch != state_->epoch || since.lsn > state_->applied_lsn ||
               since.lsn < tombstones_from_;
  std::map<uint32_t, size_t> index;  // table id -> its place in batch.tables
  for (uint32_t id : state_->table_ids()) {
    const Table& table = *state_->table(id);
    index[id] = batch.tables.size();
    SyncTableRows& rows = batch.tables.emplace_back();
    rows.table_id = id;
    rows.stride = table.stride();
    auto add = [&rows](uint64_t key, std::span<const float> state) {
      rows.keys.push_back(key);
      rows.states.insert(rows.states.end(), state.begin(), state.end());
    };
    if (batch.full) {
      table.ForEachRow(add);
    } else {
      table.ForEachRowChangedAfter(since.lsn, add);
    }
  }
  if (!batch.full) {
    // Tombstones are in lsn order: the ones after `since` are a suffix.
    auto it = std::partition_point(tombstones_.begin(), tombstones_.end(),
                                   [&](const Tombstone& t) { return t.lsn <= since.lsn; });
    for (; it != tombstones_.end(); ++it) {
      if (auto i = index.find(it->table); i != index.end()) {
        batch.tables[i->second].dropped.push_back(it->key);
      }
    }
  }
  return batch;
}

ShardState::Synced ShardReplica::synced() const {
  OrderSection order(order_mu_, this);
  return state_->synced;
}

void ShardReplica::AppendLogLocked(PushRequest&& push) {
  const size_t bytes = PayloadBytes(push);
  log_.push_back(LogEntry{std::move(push), log_appended_});
  log_appended_ += bytes;
  // Keep what a joiner's attach will forward, within the catch-up bounds; a joiner too far
  // behind starts again from a new snapshot.
  size_t pinned = 0;
  if (!join_pins_.empty()) {
    // Over the byte bound, the pins that hold the log beyond its usual length go.
    const bool over_bytes = LogBytesLocked() > options_.max_catch_up_bytes;
    for (auto it = join_pins_.begin(); it != join_pins_.end();) {
      const uint64_t behind = state_->applied_lsn - it->second.lsn;
      if (it->second.epoch != state_->epoch || behind > options_.max_catch_up_pushes ||
          (over_bytes && behind > options_.max_undurable_pushes)) {
        it = join_pins_.erase(it);
      } else {
        pinned = std::max<size_t>(pinned, behind);
        ++it;
      }
    }
  }
  // And every push that could be undurable at the primary. It admitted the newest push while
  // fewer than max_undurable_pushes, and fewer than max_undurable_bytes bytes, were undurable,
  // and durability is a prefix: so a push that a survivor may lack lies in the last
  // max_undurable_pushes, and is followed, up to the newest push, by fewer than
  // max_undurable_bytes bytes. Whatever fails either test is on every live replica.
  while (log_.size() > pinned &&
         (log_.size() > options_.max_undurable_pushes ||
          log_.back().start - log_.front().start >= options_.max_undurable_bytes)) {
    log_.pop_front();
  }
}

uint64_t ShardReplica::LogBytesLocked() const {
  return log_.empty() ? 0 : log_appended_ - log_.front().start;
}

uint64_t ShardReplica::LogBytesAfterLocked(uint64_t lsn) const {
  if (log_.empty() || lsn >= state_->applied_lsn) return 0;
  const uint64_t behind = state_->applied_lsn - lsn;  // log entries after lsn
  // Entries before the log's front have gone: every byte the log holds is after lsn.
  if (behind >= log_.size()) return LogBytesLocked();
  return log_appended_ - log_[log_.size() - behind].start;
}

void ShardReplica::ForwardLocked(const PushRequest& push, uint64_t lsn) {
  std::vector<std::pair<size_t, std::shared_ptr<BackupLink>>> targets;
  uint64_t epoch;
  {
    std::lock_guard lock(mu_);
    epoch = epoch_;
    issued_lsn_ = lsn;
    uint64_t owed = 0;
    for (size_t b = 0; b < backups_.size(); ++b) {
      const uint64_t bit = uint64_t{1} << b;
      if (dead_backups_ & bit) continue;
      if ((catching_up_ & bit) == 0) owed |= bit;
      // A backup being dropped stays owed (no ack without it until the store agrees) but is
      // not sent to: its link has failed.
      if ((dropping_backups_ & bit) == 0) targets.emplace_back(b, backups_[b]);
    }
    if (owed != 0) owed_[lsn] = owed;
    // With no live backup the push is durable now; RunDeferred delivers the acks.
    CollectReadyLocked(&deferred_);
  }
  if (targets.empty()) return;
  // Each link encodes `push` (the log's entry) before Forward returns.
  for (auto& [b, link] : targets) {
    link->Forward(epoch, lsn, push, [this, epoch, lsn, b = b](Status s) {
      OnForwardDone(epoch, lsn, b, std::move(s));
    });
  }
}

void ShardReplica::AddWaiterLocked(uint64_t lsn, Waiter waiter) {
  std::lock_guard lock(mu_);
  if (role_ != Role::kPrimary) {
    deferred_.push_back([w = std::move(waiter)] {
      w.done(Unavailable("replica stopped being primary before the push was durable"));
    });
    return;
  }
  // The count may have fallen since HandlePush looked (a forward failed meanwhile).
  if (const size_t in_sync = InSyncLocked(); in_sync < options_.min_in_sync) {
    deferred_.push_back(
        [w = std::move(waiter),
         s = BelowMinInSyncLocked(in_sync, "push applied by the primary only")] { w.done(s); });
    return;
  }
  if (lsn <= DurableLsnLocked()) {
    deferred_.push_back([w = std::move(waiter)] { w.done(w.ack); });
    return;
  }
  waiters_.emplace(lsn, std::move(waiter));
}

std::future<Status> ShardReplica::DurableFutureLocked(uint64_t lsn) {
  auto durable = std::make_shared<std::promise<Status>>();
  std::future<Status> future = durable->get_future();
  AddWaiterLocked(lsn, Waiter{PushAck{}, [durable](Result<PushAck> r) {
                                durable->set_value(r.ok() ? Status::Ok() : r.status());
                              }});
  return future;
}

size_t ShardReplica::InSyncLocked() const {
  if (role_ != Role::kPrimary) return 0;
  size_t n = 1;
  for (size_t b = 0; b < backups_.size(); ++b) {
    n += ((dead_backups_ | catching_up_) >> b & 1) == 0;
  }
  return n;
}

Status ShardReplica::BelowMinInSyncLocked(size_t in_sync, const char* what) {
  below_min_refusals_.fetch_add(1, std::memory_order_relaxed);
  return ResourceExhausted(std::string(what) + ": " + std::to_string(in_sync) +
                           " of the shard's replicas in sync, below min_in_sync " +
                           std::to_string(options_.min_in_sync) +
                           "; retry once a replica has caught up");
}

uint64_t ShardReplica::DurableLsnLocked() const {
  return owed_.empty() ? issued_lsn_ : owed_.begin()->first - 1;
}

bool ShardReplica::LeaseHeldLocked() const {
  // A lease that lapsed is not lost: the store may renew it (LeaseConfirmed), or the holder is
  // told it is gone and steps down. Meanwhile nothing is accepted and nothing acknowledged.
  return !guard_.lease_valid || guard_.lease_valid();
}

void ShardReplica::CollectReadyLocked(std::vector<std::function<void()>>* out) {
  if (waiters_.empty() || !LeaseHeldLocked()) return;
  if (const size_t in_sync = InSyncLocked(); in_sync < options_.min_in_sync) {
    // Applied here, but on too few replicas to survive a crash: the client retries, and the
    // retry is acknowledged (as a duplicate) once enough replicas hold it again.
    for (auto& [lsn, waiter] : waiters_) {
      out->push_back(
          [w = std::move(waiter),
           s = BelowMinInSyncLocked(in_sync, "push applied by the primary only")] { w.done(s); });
    }
    waiters_.clear();
    return;
  }
  const uint64_t durable = DurableLsnLocked();
  while (!waiters_.empty() && waiters_.begin()->first <= durable) {
    auto node = waiters_.extract(waiters_.begin());
    out->push_back([w = std::move(node.mapped())] { w.done(w.ack); });
  }
}

void ShardReplica::StepDownLocked(Role role, const Status& reason,
                                  std::vector<std::function<void()>>* calls) {
  // mu_ held.
  role_ = role;
  owed_.clear();
  backups_.clear();
  learners_.clear();
  catching_up_ = 0;
  dead_backups_ = 0;
  dropping_backups_ = 0;
  guard_ = {};
  for (auto& [lsn, waiter] : waiters_) {
    calls->push_back([w = std::move(waiter), reason] { w.done(reason); });
  }
  waiters_.clear();
}

void ShardReplica::OnForwardDone(uint64_t epoch, uint64_t lsn, size_t backup, Status status) {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard lock(mu_);
    if (epoch != epoch_ || role_ != Role::kPrimary) return;  // a completion from a past epoch
    const uint64_t bit = uint64_t{1} << backup;
    auto learner = learners_.find(backup);
    if (status.ok()) {
      if (auto it = owed_.find(lsn); it != owed_.end() && (it->second &= ~bit) == 0) {
        owed_.erase(it);
      }
      if (learner != learners_.end()) {
        learner->second.acked = std::max(learner->second.acked, lsn);
        AdvanceLearnerLocked(backup, &calls);
      }
    } else if (status.code() == StatusCode::kFailedPrecondition && !guard_.drop_backup) {
      // The backup follows a newer epoch: a new primary exists. Never ack from here again.
      StepDownLocked(Role::kFenced,
                     Unavailable("deposed as primary (" + status.message() + "); retry"), &calls);
    } else if (learner != learners_.end() && !learner->second.adding) {
      // Not a member: nothing to commit. It must join again from a new snapshot.
      learners_.erase(learner);
      catching_up_ &= ~bit;
      ForgetBackupLocked(bit);
    } else if (learner != learners_.end()) {
      // Its addition may commit: it keeps counting until the store has answered.
      learner->second.failed = true;
      learner->second.failure = status;
    } else {
      // With a store, a backup's refusal for a newer epoch is checked there before this primary
      // steps down: the drop commits only while the store names this primary with its lease
      // alive. So a primary deposed for real steps down when the drop fails, and a backup that
      // claims an epoch nobody committed (stale, buggy or forged) is dropped instead of
      // deposing a live primary. Until the store answers the backup still counts: no ack
      // goes out without it.
      MemberLinkFailedLocked(backup, status, &calls);
    }
    CollectReadyLocked(&calls);
    DeferIfOrderedLocked(&calls);
  }
  for (auto& call : calls) call();
}

void ShardReplica::MemberLinkFailedLocked(size_t backup, const Status& why,
                                          std::vector<std::function<void()>>* calls) {
  const uint64_t bit = uint64_t{1} << backup;
  // No store to ask (the control): the backup stops counting at once.
  if (!guard_.drop_backup) return ForgetBackupLocked(bit);
  // The backup is unreachable, or only slow: it keeps counting until the store has committed
  // its removal, so an ack never rests on fewer replicas than the configuration.
  if ((dropping_backups_ & bit) != 0 || (dead_backups_ & bit) != 0) return;
  dropping_backups_ |= bit;
  calls->push_back([this, epoch = epoch_, backup, why, drop = guard_.drop_backup] {
    drop(backup, why, [this, epoch, backup](Status s) { OnDropCommitted(epoch, backup, s); });
  });
}

void ShardReplica::CommitFailedLocked(const char* what, const Status& status,
                                      std::vector<std::function<void()>>* calls) {
  StepDownLocked(Role::kFenced,
                 Unavailable(std::string("could not ") + what + " (" + status.message() +
                             "); retry at the current primary"),
                 calls);
}

void ShardReplica::OnDropCommitted(uint64_t epoch, size_t backup, const Status& status) {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard lock(mu_);
    if (epoch != epoch_ || role_ != Role::kPrimary) return;
    const uint64_t bit = uint64_t{1} << backup;
    if (!status.ok()) {
      CommitFailedLocked("drop an unreachable backup", status, &calls);
    } else {
      dropping_backups_ &= ~bit;
      ForgetBackupLocked(bit);
      CollectReadyLocked(&calls);
    }
    DeferIfOrderedLocked(&calls);
  }
  for (auto& call : calls) call();
}

void ShardReplica::ForgetBackupLocked(uint64_t bit) {
  dead_backups_ |= bit;
  for (auto it = owed_.begin(); it != owed_.end();) {
    it = (it->second &= ~bit) == 0 ? owed_.erase(it) : std::next(it);
  }
}

// ---- Catch-up --------------------------------------------------------------------------------

Result<ShardReplica::JoinSnapshot> ShardReplica::CopyAndEncodeAsPrimary(
    const std::function<void(const Position&)>& pin, uint32_t version) {
  Result<std::unique_ptr<ShardState>> copy = FailedPrecondition(
      "replica is not the primary of "
      "its shard");
  {
    OrderSection order(order_mu_, this);
    bool primary;
    {
      std::lock_guard lock(mu_);
      primary = role_ == Role::kPrimary && LeaseHeldLocked();
    }
    // Pushes wait only for the copy; the encoding below runs beside them.
    if (primary) {
      Status encodable = state_->CheckEncodable(version);
      copy = encodable.ok() ? state_->Copy() : encodable;
    }
    if (copy.ok()) pin(Position{(*copy)->epoch, (*copy)->applied_lsn});
  }
  RunDeferred();
  if (!copy.ok()) return copy.status();
  BX_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, (*copy)->Encode(version));
  return JoinSnapshot{Position{(*copy)->epoch, (*copy)->applied_lsn}, std::move(bytes)};
}

Result<ShardReplica::JoinSnapshot> ShardReplica::SnapshotForJoin(uint32_t joiner,
                                                                 uint32_t version) {
  return CopyAndEncodeAsPrimary([&](const Position& at) { join_pins_[joiner] = at; }, version);
}

Result<ShardReplica::JoinSnapshot> ShardReplica::SnapshotForCheckpoint(
    std::chrono::milliseconds timeout) {
  std::future<Status> durable_future;
  // The copy's last push is the one to wait for: every one before it is durable first.
  BX_ASSIGN_OR_RETURN(JoinSnapshot snapshot, CopyAndEncodeAsPrimary([&](const Position& at) {
                        durable_future = DurableFutureLocked(at.lsn);
                      }));
  const Position at = snapshot.position;
  if (durable_future.wait_for(timeout) != std::future_status::ready) {
    return DeadlineExceeded("checkpoint: lsn " + std::to_string(at.lsn) + " of epoch " +
                            std::to_string(at.epoch) + " not on min_in_sync replicas within " +
                            std::to_string(timeout.count()) + " ms");
  }
  if (Status s = durable_future.get(); !s.ok()) return s.WithContext("checkpoint");
  return snapshot;
}

// ---- Planned handover ---------------------------------------------------------------------

Result<ShardReplica::Position> ShardReplica::BeginHandover(std::chrono::milliseconds timeout) {
  std::future<Status> durable_future;
  Position at;
  Status refused;
  {
    OrderSection order(order_mu_, this);
    {
      std::lock_guard lock(mu_);
      if (role_ != Role::kPrimary || !LeaseHeldLocked()) {
        refused = FailedPrecondition("handover: this replica is not a primary holding its lease");
      }
    }
    if (refused.ok()) {
      handing_over_ = true;
      at = Position{state_->epoch, state_->applied_lsn};
      // The newest push is the one to wait for: every one before it is durable first.
      durable_future = DurableFutureLocked(at.lsn);
    }
  }
  RunDeferred();
  if (!refused.ok()) return refused;
  Status waited =
      DeadlineExceeded("lsn " + std::to_string(at.lsn) + " of epoch " + std::to_string(at.epoch) +
                       " not durable within " + std::to_string(timeout.count()) + " ms");
  if (durable_future.wait_for(timeout) == std::future_status::ready) waited = durable_future.get();
  if (!waited.ok()) {
    EndHandover();
    return waited.WithContext("handover");
  }
  return at;
}

void ShardReplica::EndHandover() {
  OrderSection order(order_mu_, this);
  handing_over_ = false;
}

Status ShardReplica::AttachLearner(uint32_t joiner, std::shared_ptr<BackupLink> link,
                                   AddMember add) {
  Status result;
  {
    OrderSection order(order_mu_, this);
    auto pin = join_pins_.find(joiner);
    const uint64_t first = state_->applied_lsn - log_.size() + 1;  // lsn of log_.front()
    size_t b = 0;
    {
      std::lock_guard lock(mu_);
      if (role_ != Role::kPrimary || pin == join_pins_.end() ||
          pin->second.epoch != state_->epoch) {
        result = FailedPrecondition("no snapshot of this primary's epoch for the joiner");
      } else if (pin->second.lsn + 1 < first) {
        result = FailedPrecondition("the log moved past the joiner's snapshot; take a new one");
      } else if (backups_.size() >= kMaxBackups) {
        result = ResourceExhausted("too many backup links on this primary");
      } else {
        b = backups_.size();
        backups_.push_back(link);
        catching_up_ |= uint64_t{1} << b;
        learners_[b] = Learner{pin->second.lsn, state_->applied_lsn, false, false, std::move(add)};
        AdvanceLearnerLocked(b, &deferred_);  // nothing to catch up on: counts at once
      }
    }
    if (result.ok()) {
      // The pushes after its snapshot, in lsn order, before any new one (order_mu_ is held).
      const uint64_t epoch = state_->epoch;
      for (uint64_t lsn = pin->second.lsn + 1; lsn <= state_->applied_lsn; ++lsn) {
        link->Forward(epoch, lsn, log_[lsn - first].push,
                      [this, epoch, lsn, b](Status s) { OnForwardDone(epoch, lsn, b, s); });
      }
    }
    if (pin != join_pins_.end()) join_pins_.erase(pin);
  }
  RunDeferred();
  return result;
}

void ShardReplica::AdvanceLearnerLocked(size_t backup, std::vector<std::function<void()>>* calls) {
  Learner& l = learners_.at(backup);
  const uint64_t bit = uint64_t{1} << backup;
  if ((catching_up_ & bit) != 0 && l.acked >= l.target) {
    // Caught up with the attach: from now on acks wait for it too. Pushes up to the current
    // lsn may have been acked without it, so it joins only once it holds them (the target).
    catching_up_ &= ~bit;
    l.target = issued_lsn_;
    for (auto it = owed_.upper_bound(l.acked); it != owed_.end(); ++it) it->second |= bit;
  }
  if ((catching_up_ & bit) == 0 && !l.adding && l.acked >= l.target) {
    l.adding = true;
    calls->push_back([this, epoch = epoch_, backup, add = l.add] {
      add(backup, [this, epoch, backup](Status s) { OnJoinCommitted(epoch, backup, s); });
    });
  }
}

void ShardReplica::OnJoinCommitted(uint64_t epoch, size_t backup, const Status& status) {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard lock(mu_);
    if (epoch != epoch_ || role_ != Role::kPrimary) return;
    auto learner = learners_.find(backup);
    if (learner == learners_.end()) return;
    const bool failed = learner->second.failed;
    const Status failure = learner->second.failure;
    learners_.erase(learner);
    if (!status.ok()) {
      CommitFailedLocked("add a caught-up replica", status, &calls);
    } else if (failed) {
      MemberLinkFailedLocked(backup, failure, &calls);  // a member now, whose link failed
    }
    CollectReadyLocked(&calls);
    DeferIfOrderedLocked(&calls);
  }
  for (auto& call : calls) call();
}

Status ShardReplica::InstallSnapshot(std::span<const std::byte> bytes) {
  Result<std::unique_ptr<ShardState>> decoded = ShardState::Decode(bytes, options_.dedup);
  std::vector<std::function<void()>> calls;
  Status result;
  {
    OrderSection order(order_mu_, this);
    {
      std::lock_guard lock(mu_);
      if (role_ == Role::kPrimary) return FailedPrecondition("a primary installs no snapshot");
      role_ = Role::kFenced;  // until the state is whole again
    }
    if (!decoded.ok()) return decoded.status();
    ShardState& snapshot = **decoded;
    if (snapshot.epoch < min_forward_epoch_) {
      return FailedPrecondition("snapshot of epoch " + std::to_string(snapshot.epoch) +
                                ", the shard's configuration is at epoch " +
                                std::to_string(min_forward_epoch_));
    }
    for (auto& [lsn, entry] : reordered_) {
      for (ForwardDone& done : entry.second) {
        calls.push_back([d = std::move(done)] { d(Aborted("replica installed a snapshot")); });
      }
    }
    reordered_.clear();
    log_.clear();
    join_pins_.clear();
    result = state_->Adopt(snapshot);
    PublishDedupLocked();
    if (result.ok()) {
      min_forward_epoch_ = std::max(min_forward_epoch_, state_->epoch);
      std::lock_guard lock(mu_);
      role_ = Role::kBackup;
      epoch_ = state_->epoch;
    }
  }
  for (auto& call : calls) call();
  return result;
}

void ShardReplica::ForEachTable(const std::function<void(const Table&)>& fn) const {
  for (uint32_t id : state_->table_ids()) fn(*state_->table(id));
}

Status ShardReplica::Restore(ShardState& restored) {
  OrderSection order(order_mu_, this);
  {
    std::lock_guard lock(mu_);
    if (role_ != Role::kBackup || state_->epoch != 0 || state_->applied_lsn != 0) {
      return FailedPrecondition(
          "restore: only into a new replica (a backup at epoch 0 that applied nothing)");
    }
  }
  for (uint32_t id : restored.table_ids()) {
    const TableConfig& config = restored.table(id)->config();
    if (state_->table(id) == nullptr) {
      return FailedPrecondition("restore: the checkpoint's table " + std::to_string(id) + " (" +
                                config.name + ") is not one of this server's tables");
    }
    // Bounds are the cluster file's to choose: a checkpoint of an unbounded table (or one of
    // older format) restores into a bounded one, keeping the most recently pushed rows.
    const TableConfig& mine = state_->table(id)->config();
    if (mine.ttl_seconds != config.ttl_seconds ||
        mine.admit_after_pushes != config.admit_after_pushes) {
      return FailedPrecondition(
          "restore: table " + std::to_string(id) + " (" + config.name + ") was checkpointed " +
          "with ttl_seconds " + std::to_string(config.ttl_seconds) + " and admit_after_pushes " +
          std::to_string(config.admit_after_pushes) + ", the cluster file has " +
          std::to_string(mine.ttl_seconds) + " and " + std::to_string(mine.admit_after_pushes) +
          " (restore with the checkpoint's values: its rows' stamps and counts depend on them)");
    }
    if (mine.max_rows != config.max_rows || mine.max_bytes != config.max_bytes) {
      BX_RETURN_IF_ERROR(restored.Rebound(id, mine.max_rows, mine.max_bytes));
    }
  }
  restored.epoch = 0;
  restored.applied_lsn = 0;
  Status result = state_->Adopt(restored);
  PublishDedupLocked();
  return result;
}

void ShardReplica::ReportBackupFailed(size_t index) {
  uint64_t epoch;
  {
    std::lock_guard lock(mu_);
    if (role_ != Role::kPrimary || index >= backups_.size()) return;
    epoch = epoch_;
  }
  // lsn 0 is owed by nobody: only the failure handling runs.
  OnForwardDone(epoch, 0, index, Unavailable("backup's process was replaced"));
}

void ShardReplica::StepDown(const std::string& reason) {
  Fence(reason, /*only_a_primary=*/false);
}

void ShardReplica::StepDownIfPrimary(const std::string& reason) {
  Fence(reason, /*only_a_primary=*/true);
}

void ShardReplica::Fence(const std::string& reason, bool only_a_primary) {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard lock(mu_);
    if (role_ == Role::kFenced || (only_a_primary && role_ != Role::kPrimary)) return;
    StepDownLocked(Role::kFenced, Unavailable(reason), &calls);
    DeferIfOrderedLocked(&calls);
  }
  for (auto& call : calls) call();
}

void ShardReplica::DeferIfOrderedLocked(std::vector<std::function<void()>>* calls) {
  // Inside an order section of this replica (e.g. a forward completing inline): RunDeferred
  // runs the callbacks once order_mu_ is released.
  if (order_holder != this) return;
  for (auto& c : *calls) deferred_.push_back(std::move(c));
  calls->clear();
}

void ShardReplica::RunDeferred() {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard lock(mu_);
    calls.swap(deferred_);
  }
  for (auto& call : calls) call();
}

// ---- Backup ----------------------------------------------------------------------------------

void ShardReplica::HandleForward(ForwardedPush forwarded, ForwardDone done) {
  std::vector<std::function<void()>> calls;
  {
    OrderSection order(order_mu_, this);
    Status refused;
    if (forwarded.epoch > kMaxEpoch) {
      // Forged or corrupt: refused before it can fence a primary or move a backup's epoch.
      refused = InvalidArgument("forward from epoch " + std::to_string(forwarded.epoch) +
                                ", above the limit " + std::to_string(kMaxEpoch));
    }
    // Before the role checks: a primary fences itself on a forward from a newer epoch.
    if (refused.ok()) refused = CheckEpochCommittedLocked(forwarded.epoch);
    if (refused.ok()) {
      std::lock_guard lock(mu_);
      if (role_ == Role::kFenced) {
        // Not FailedPrecondition: that would tell the sender it was deposed.
        refused = Aborted("replica was deposed and must be rebuilt from a snapshot");
      } else if (role_ == Role::kPrimary) {
        if (forwarded.epoch > epoch_) {
          StepDownLocked(Role::kFenced, Unavailable("a newer primary exists; retry there"),
                         &deferred_);
          refused = Aborted("replica was primary of an older epoch; rebuild it from a snapshot");
        } else {
          refused = FailedPrecondition("replica is primary of epoch " + std::to_string(epoch_));
        }
      }
    }
    if (refused.ok() && forwarded.epoch < state_->epoch) {
      refused = FailedPrecondition("forward from epoch " + std::to_string(forwarded.epoch) +
                                   ", replica follows epoch " + std::to_string(state_->epoch));
    }
    if (refused.ok() && forwarded.epoch < min_forward_epoch_) {
      refused = FailedPrecondition("forward from epoch " + std::to_string(forwarded.epoch) +
                                   ", the shard's configuration is at epoch " +
                                   std::to_string(min_forward_epoch_));
    }
    if (!refused.ok()) {
      calls.push_back([d = std::move(done), refused] { d(refused); });
    } else {
      if (forwarded.epoch > state_->epoch) {
        // A new primary: its lsns start again at 1; anything held from the old epoch is void.
        for (auto& [lsn, entry] : reordered_) {
          for (ForwardDone& d : entry.second) {
            calls.push_back([d = std::move(d)] { d(FailedPrecondition("epoch ended")); });
          }
        }
        reordered_.clear();
        state_->epoch = forwarded.epoch;
        state_->applied_lsn = 0;
        std::lock_guard lock(mu_);
        epoch_ = forwarded.epoch;
      }
      const uint64_t lsn = forwarded.lsn;
      if (lsn <= state_->applied_lsn) {
        calls.push_back([d = std::move(done)] { d(Status::Ok()); });
      } else if (lsn == state_->applied_lsn + 1) {
        Status result;
        ApplyForwardLocked(std::move(forwarded), &result);
        calls.push_back([d = std::move(done), result] { d(result); });
        // Drain the forwards that were waiting for this one.
        while (result.ok() && !reordered_.empty() &&
               reordered_.begin()->first == state_->applied_lsn + 1) {
          auto node = reordered_.extract(reordered_.begin());
          ApplyForwardLocked(std::move(node.mapped().first), &result);
          for (ForwardDone& d : node.mapped().second) {
            calls.push_back([d = std::move(d), result] { d(result); });
          }
        }
      } else if (auto it = reordered_.find(lsn); it != reordered_.end()) {
        it->second.second.push_back(std::move(done));  // a resend of a forward still waiting
      } else if (reordered_.size() >= options_.max_reordered_forwards) {
        calls.push_back([d = std::move(done)] {
          d(ResourceExhausted("backup holds too many out-of-order forwards"));
        });
      } else {
        std::vector<ForwardDone> waiting;
        waiting.push_back(std::move(done));
        reordered_.emplace(lsn, std::make_pair(std::move(forwarded), std::move(waiting)));
      }
    }
  }
  RunDeferred();
  for (auto& call : calls) call();
}

void ShardReplica::RefuseEpochsBelow(uint64_t epoch) {
  OrderSection order(order_mu_, this);
  min_forward_epoch_ = std::max(min_forward_epoch_, epoch);
}

void ShardReplica::SetEpochCheck(EpochCommitted check) {
  OrderSection order(order_mu_, this);
  epoch_check_ = std::move(check);
}

Status ShardReplica::CheckEpochCommittedLocked(uint64_t epoch) {
  if (!epoch_check_ || epoch <= state_->epoch || epoch <= min_forward_epoch_) return Status::Ok();
  Result<bool> committed = epoch_check_(epoch);
  if (!committed.ok()) {
    return Unavailable("cannot confirm epoch " + std::to_string(epoch) +
                       " with the configuration store: " + committed.status().ToString());
  }
  if (!*committed) {
    return InvalidArgument("forward from epoch " + std::to_string(epoch) +
                           ", which the configuration store has not committed for this shard");
  }
  // Committed, so every older epoch is over: what RefuseEpochsBelow would do on the monitor's
  // next read of the configuration.
  min_forward_epoch_ = epoch;
  return Status::Ok();
}

void ShardReplica::ApplyForwardLocked(ForwardedPush&& forwarded, Status* result) {
  PushRequest& push = forwarded.push;
  switch (state_->dedup().Check(push.id, push.client_key)) {
    case PushDedup::Verdict::kDuplicate:
      // A re-forward after failover of a push this replica already has.
    case PushDedup::Verdict::kExpired:
      // The same, its client evicted since: this replica's record equals the primary's at
      // every position it shares, so a push it lacks cannot find its client evicted here.
      break;
    case PushDedup::Verdict::kTooFarAhead:
    case PushDedup::Verdict::kRecordFull:
    case PushDedup::Verdict::kWrongKey:
      *result = Internal("backup diverged: the primary applied a push its dedup record refuses");
      return;
    case PushDedup::Verdict::kNew:
      if (Status s = ApplyLocked(push, forwarded.lsn); !s.ok()) {
        *result = Internal("backup diverged: cannot apply forwarded push: " + s.message());
        return;
      }
      state_->dedup().MarkApplied(push.id, push.client_key);
      PublishDedupLocked();
      AppendLogLocked(std::move(push));
      break;
  }
  state_->applied_lsn = forwarded.lsn;
  *result = Status::Ok();
}

// ---- Reads and state -------------------------------------------------------------------------

Status ShardReplica::Fetch(uint32_t table_id, std::span<const uint64_t> keys,
                           std::span<std::byte> out) const {
  std::shared_lock<std::shared_mutex> whole;
  if (options_.follower && options_.sync_visible_whole) whole = std::shared_lock(sync_mu_);
  const Table* table = state_->table(table_id);
  if (table == nullptr) return NotFound("fetch: no table " + std::to_string(table_id));
  return table->Fetch(keys, out);
}

Result<uint32_t> ShardReplica::TableDim(uint32_t table_id) const {
  const Table* table = state_->table(table_id);
  if (table == nullptr) return NotFound("no table " + std::to_string(table_id));
  return table->dim();
}

Status ShardReplica::EncodeFetchResponse(const FetchRequest& request,
                                         std::span<std::byte> out) const {
  BX_ASSIGN_OR_RETURN(uint32_t dim, TableDim(request.table_id));
  BX_RETURN_IF_ERROR(EncodeFetchResponseHeader(request.table_id, dim, request.keys.size(), out));
  return Fetch(request.table_id, request.keys, FetchResponseValues(out));
}

Status ShardReplica::Save(const std::string& path) {
  OrderSection order(order_mu_, this);
  return state_->Save(path);
}

std::string_view ShardReplica::RoleName(Role role) {
  switch (role) {
    case Role::kBackup:
      return "backup";
    case Role::kPrimary:
      return "primary";
    case Role::kFenced:
      return "fenced";
  }
  return "unknown";
}

ShardReplica::Role ShardReplica::role() const {
  std::lock_guard lock(mu_);
  return role_;
}

bool ShardReplica::PrimaryWithLease() {
  std::lock_guard lock(mu_);
  return role_ == Role::kPrimary && LeaseHeldLocked();
}

void ShardReplica::LeaseConfirmed() {
  std::vector<std::function<void()>> calls;
  {
    std::lock_guard lock(mu_);
    if (role_ == Role::kPrimary) CollectReadyLocked(&calls);
    DeferIfOrderedLocked(&calls);
  }
  for (auto& call : calls) call();
}

ShardReplica::Position ShardReplica::position() const {
  OrderSection order(order_mu_, this);
  return Position{state_->epoch, state_->applied_lsn};
}

size_t ShardReplica::log_bytes() const {
  OrderSection order(order_mu_, this);
  return LogBytesLocked();
}

size_t ShardReplica::in_sync_replicas() const {
  std::lock_guard lock(mu_);
  return InSyncLocked();
}

uint64_t ShardReplica::below_min_in_sync_refusals() const {
  return below_min_refusals_.load(std::memory_order_relaxed);
}

size_t ShardReplica::live_backups() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (size_t b = 0; b < backups_.size(); ++b) {
    n += (dead_backups_ >> b & 1) == 0 && !learners_.contains(b);
  }
  return n;
}

}  // namespace bx::ps
