// LeasedFailoverCore: failover through the shard's configuration in a KvStore (ps_service.h,
// docs/PS.md "Configuration and leases").
#include <algorithm>
#include <utility>

#include "bx/log.h"
#include "ps/service/ps_service.h"

namespace bx::ps {

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kStoreTimeout{1000};

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}
}  // namespace

Result<std::unique_ptr<LeasedFailoverCore>> LeasedFailoverCore::Start(PsServerCore* server,
                                                                      FailoverOptions options) {
  const size_t n = options.replicas.size();
  if (server == nullptr || options.self >= n || options.initial_primary >= n) {
    return InvalidArgument("failover: self and initial primary must be replicas of the shard");
  }
  if (options.probe_interval.count() <= 0 || options.lease_ttl < 3 * options.probe_interval) {
    return InvalidArgument("failover: need 0 < 3 x probe interval <= lease ttl");
  }
  server->LendSecrets(&options.client.transport);
  BX_ASSIGN_OR_RETURN(std::shared_ptr<KvStore> store,
                      OpenKvStore(options.config_store, kStoreTimeout));
  std::unique_ptr<LeasedFailoverCore> core(
      new LeasedFailoverCore(server, std::move(options), std::move(store)));
  // Reads (docs/PS.md "Reads"): the primary while its lease holds; a backup while it saw itself
  // in the set less than half a lease ttl ago (so a backup dropped without knowing it yet may
  // miss pushes acknowledged during at most that long); never a fenced replica.
  server->SetReadGate([server, confirmed = core->member_confirmed_ns_,
                       window = core->options_.lease_ttl / 2]() -> Status {
    ShardReplica& replica = server->replica();
    switch (replica.role()) {
      case ShardReplica::Role::kFenced:
        return Unavailable("replica is out of service (deposed or not in the set)");
      case ShardReplica::Role::kPrimary:
        if (replica.PrimaryWithLease()) return Status::Ok();
        return Unavailable("primary's lease expired");
      case ShardReplica::Role::kBackup:
        break;
    }
    if (std::chrono::nanoseconds(NowNanos() - confirmed->load()) < window) return Status::Ok();
    return Unavailable("backup has not confirmed its membership recently");
  });
  core->OpenJoinDesk();
  core->OpenHandoverDesk();
  core->thread_ = std::thread([c = core.get()] { c->Run(); });
  return core;
}

LeasedFailoverCore::LeasedFailoverCore(PsServerCore* server, FailoverOptions options,
                                       std::shared_ptr<KvStore> store)
    : server_(server), options_(std::move(options)), store_(std::move(store)) {
  ShardCoordinator::Options co;
  co.prefix = options_.config_prefix;
  co.shard = options_.shard;
  co.self = static_cast<uint32_t>(options_.self);
  co.lease_ttl = options_.lease_ttl;
  co.drift_margin = std::max(options_.lease_ttl / 10, std::chrono::milliseconds(1));
  co.on_lease_lost = [this](const Status& why) {
    Log("lease lost (" + why.ToString() + "); stepping down");
    server_->replica().StepDownIfPrimary("primary lost its lease: " + why.message());
  };
  // The store did not answer for longer than the lease (paused, restarted) and then renewed it:
  // this primary keeps its office, and the acks held back meanwhile go out.
  co.on_renewal_unanswered = [this](const Status& why) {
    Log("lease renewal unanswered (" + why.ToString() + "); renewing again");
  };
  co.on_lease_renewed = [this] {
    Log("lease renewed after the store came back; still primary");
    server_->replica().LeaseConfirmed();
  };
  coordinator_ = std::make_unique<ShardCoordinator>(store_.get(), std::move(co));
  // Forwards from an epoch this replica has not seen are taken only once the store shows it
  // committed (the configuration's epoch is read; it only grows).
  server_->replica().SetEpochCheck([coordinator = coordinator_.get()](uint64_t epoch) {
    Result<std::optional<VersionedConfig>> read = coordinator->Read();
    if (!read.ok()) return Result<bool>(read.status());
    return Result<bool>(read->has_value() && (*read)->config.epoch >= epoch);
  });
}

LeasedFailoverCore::~LeasedFailoverCore() {
  server_->replica().SetEpochCheck(nullptr);  // it reads coordinator_
  CloseHandoverDesk();
  CloseJoinDesk();
  std::vector<Change> pending;
  std::vector<Handover> handovers;
  {
    std::lock_guard lock(inbox_->mu);
    inbox_->closed = true;
    pending.swap(inbox_->changes);
    handovers.swap(inbox_->handovers);
  }
  inbox_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
  server_->SetReadGate(nullptr);
  // Stops renewing and revokes the lease before the replica can ack again: step down first.
  if (primary_epoch_ != 0) server_->replica().StepDown("failover monitor stopped");
  coordinator_.reset();
  for (Change& change : pending) change.committed(Aborted("failover monitor stopped"));
  for (Handover& h : handovers) h.done(Aborted("failover monitor stopped"));
}

void LeasedFailoverCore::Log(const std::string& line) const {
  std::string text = "failover: " + line;
  if (options_.log) return options_.log(text);
  bx::Log(LogLevel::kInfo, text);
}

void LeasedFailoverCore::LogOnce(const std::string& line) {
  if (line == last_log_) return;
  last_log_ = line;
  Log(line);
}

void LeasedFailoverCore::Run() {
  std::unique_lock lock(inbox_->mu);
  while (!inbox_->closed) {
    inbox_->take_over = false;
    lock.unlock();
    RunChanges();
    RunHandovers();
    Step();
    lock.lock();
    inbox_->cv.wait_for(lock, options_.probe_interval, [this] {
      return inbox_->closed || !inbox_->changes.empty() || !inbox_->handovers.empty() ||
             inbox_->take_over;
    });
  }
}

void LeasedFailoverCore::Inbox::Submit(Change change) {
  {
    std::unique_lock lock(mu);
    if (!closed) {
      changes.push_back(std::move(change));
      lock.unlock();
      cv.notify_all();
      return;
    }
  }
  change.committed(Aborted("failover monitor stopped"));
}

void LeasedFailoverCore::Inbox::Drop(size_t link, const Status& why,
                                     std::function<void(Status)> committed) {
  std::optional<uint32_t> replica;
  {
    std::lock_guard lock(mu);
    if (auto it = link_replica.find(link); it != link_replica.end()) replica = it->second;
  }
  if (!replica) return committed(Internal("drop of an unknown backup link"));
  Submit(Change{false, ShardMember{*replica, {}}, link, std::move(committed), why.ToString()});
}

std::optional<size_t> LeasedFailoverCore::Inbox::LinkOf(uint32_t replica) {
  std::lock_guard lock(mu);
  for (auto& [link, r] : link_replica) {
    if (r == replica) return link;
  }
  return std::nullopt;
}

void LeasedFailoverCore::RunChanges() {
  std::vector<Change> changes;
  {
    std::lock_guard lock(inbox_->mu);
    changes.swap(inbox_->changes);
  }
  for (Change& change : changes) {
    const std::string replica = std::to_string(change.member.replica);
    Result<VersionedConfig> config =
        change.add ? coordinator_->Add(change.member) : coordinator_->Drop(change.member.replica);
    if (config.ok() && change.add) {
      std::lock_guard lock(inbox_->mu);
      inbox_->link_replica[change.link] = change.member.replica;
    }
    const std::string what =
        change.add ? "added caught-up replica " : "dropped unreachable replica ";
    const std::string why = change.add ? "" : " after " + change.why;
    Log(config.ok() ? what + replica + (change.add ? " to" : " from") + " the set (epoch " +
                          std::to_string(config->config.epoch) + ")" + why
                    : "could not change the set (" + what + replica + why +
                          "): " + config.status().ToString());
    change.committed(config.status());
  }
}

void LeasedFailoverCore::Step() {
  const uint32_t self = static_cast<uint32_t>(options_.self);
  if (!registered_) {
    if (Status s = coordinator_->Register(); !s.ok()) {
      return LogOnce("cannot register with " + store_->Describe() + ": " + s.ToString());
    }
    registered_ = true;
    Log("registered replica " + std::to_string(self) + " (incarnation " +
        coordinator_->incarnation() + ") with " + store_->Describe());
  }
  const ShardReplica::Role role = server_->replica().role();
  const int64_t sent = NowNanos();
  Result<std::optional<VersionedConfig>> read = coordinator_->Read();
  if (!read.ok()) return LogOnce("cannot read the configuration: " + read.status().ToString());
  if (!*read) {
    if (self == options_.initial_primary) TryBootstrap();
    return;
  }
  const VersionedConfig& current = **read;
  const ShardMember* me = current.config.Find(self);
  server_->replica().RefuseEpochsBelow(current.config.epoch);
  if (me == nullptr || me->incarnation != coordinator_->incarnation()) {
    return CatchUp(current);
  }
  if (attached_at_) {
    attached_at_.reset();
    Log("joined the set of epoch " + std::to_string(current.config.epoch));
  }
  member_confirmed_ns_->store(sent);
  // A member out of service (a primary that lost its lease) waits for the next epoch, which
  // leaves it out, and then catches up. One that stepped down by itself (a change it could not
  // commit) still holds its lease: it gives it up, or no backup could ever take over.
  if (role == ShardReplica::Role::kFenced) {
    if (coordinator_->office()) {
      Log("out of service as primary of epoch " + std::to_string(current.config.epoch) +
          "; giving up the lease");
      coordinator_->Resign();
    }
    return;
  }
  if (role == ShardReplica::Role::kPrimary) {
    if (current.config.epoch != primary_epoch_ || current.config.primary != self) {
      Log("the store names replica " + std::to_string(current.config.primary) +
          " primary of epoch " + std::to_string(current.config.epoch) + "; stepping down");
      server_->replica().StepDown("the store names another primary");
    }
    return;
  }
  Result<bool> alive = coordinator_->PrimaryLeaseAlive();
  if (!alive.ok()) return LogOnce("cannot read the lease: " + alive.status().ToString());
  if (*alive) {
    lease_gone_since_.reset();
    return LogOnce("following replica " + std::to_string(current.config.primary) +
                   ", primary of epoch " + std::to_string(current.config.epoch));
  }
  TryPromote(current);
}

void LeasedFailoverCore::TryBootstrap() {
  const uint32_t n = static_cast<uint32_t>(options_.replicas.size());
  Result<std::vector<std::optional<std::string>>> registered = coordinator_->Registered(n);
  if (!registered.ok()) return LogOnce("cannot read members: " + registered.status().ToString());
  std::vector<ShardMember> members;
  for (uint32_t r = 0; r < n; ++r) {
    if (!(*registered)[r])
      return LogOnce("waiting for replica " + std::to_string(r) + " to register");
    members.push_back({r, r == options_.self ? coordinator_->incarnation() : *(*registered)[r]});
  }
  Result<VersionedConfig> config = coordinator_->Bootstrap(std::move(members));
  if (!config.ok()) return Log("bootstrap: " + config.status().ToString());
  TakeOver(*config, "created the configuration");
}

void LeasedFailoverCore::TryPromote(const VersionedConfig& seen) {
  const Clock::time_point now = Clock::now();
  if (!lease_gone_since_) lease_gone_since_ = now;
  // A primary that handed the shard over named the backup that holds every push: it promotes
  // itself at once, and the others leave it a lease ttl to do so.
  const std::optional<uint32_t> successor = NamedSuccessor(seen);
  const bool named = successor == options_.self;
  if (successor && !named && now - *lease_gone_since_ < options_.lease_ttl) {
    return LogOnce("the primary handed the shard over to replica " + std::to_string(*successor) +
                   "; leaving the promotion to it");
  }
  // Prefer the member holding the most pushes (fewest to re-forward, nothing unacknowledged
  // forgotten); one that does not answer, or not within a lease ttl, is passed over.
  if (!named && now - *lease_gone_since_ < options_.lease_ttl) {
    const ShardReplica::Position mine = server_->replica().position();
    for (const ShardMember& m : seen.config.members) {
      if (m.replica == options_.self || m.replica == seen.config.primary) continue;
      Result<PingReply> ping =
          PingReplicaOnce(options_.replicas[m.replica], options_.client, options_.probe_interval);
      if (!ping.ok() || ping->role != ShardReplica::Role::kBackup) continue;
      if (ping->position > mine || (ping->position == mine && m.replica < options_.self)) {
        return LogOnce("primary's lease expired; deferring to replica " +
                       std::to_string(m.replica) + ", which holds as much or more");
      }
    }
  }
  Result<VersionedConfig> config = coordinator_->Promote(seen);
  if (!config.ok()) return Log("promotion: " + config.status().ToString());
  promoted_epoch_.store(config->config.epoch);
  TakeOver(*config, named ? "promoted as the successor the primary handed the shard to"
                          : "promoted after the primary's lease expired");
}

void LeasedFailoverCore::TakeOver(const VersionedConfig& config, const char* how) {
  std::vector<rpc::ReplicaAddress> backups;
  {
    std::lock_guard lock(inbox_->mu);
    inbox_->link_replica.clear();
    for (const ShardMember& m : config.config.members) {
      if (m.replica == options_.self) continue;
      inbox_->link_replica[backups.size()] = m.replica;
      backups.push_back(options_.replicas[m.replica]);
    }
  }
  ShardReplica::PrimaryGuard guard;
  guard.drop_backup = [inbox = inbox_](size_t link, const Status& why,
                                       std::function<void(Status)> done) {
    inbox->Drop(link, why, std::move(done));
  };
  guard.lease_valid = [c = coordinator_.get()] { return c->LeaseValid(); };
  if (Status s = server_->BecomePrimary(config.config.epoch, backups, std::move(guard)); !s.ok()) {
    Log("becoming primary of epoch " + std::to_string(config.config.epoch) +
        " failed: " + s.ToString());
    server_->replica().StepDown("could not become primary");
    return;
  }
  primary_epoch_ = config.config.epoch;
  std::string waited;
  if (lease_gone_since_) {
    waited = ", " +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                Clock::now() - *lease_gone_since_)
                                .count()) +
             " ms after finding the lease gone";
  }
  Log(std::string(how) + ": now primary of epoch " + std::to_string(config.config.epoch) +
      " with " + std::to_string(backups.size()) + " backups" + waited);
}

}  // namespace bx::ps
