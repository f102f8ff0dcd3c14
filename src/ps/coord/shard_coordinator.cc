#include "ps/coord/shard_coordinator.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <random>
#include <utility>

namespace bx::ps {
namespace {

using Clock = std::chrono::steady_clock;

std::string NewIncarnation() {
  std::random_device rd;
  const uint64_t value = (uint64_t{rd()} << 32) ^ rd();
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

int64_t Nanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

const ShardMember* ShardConfig::Find(uint32_t replica) const {
  for (const ShardMember& m : members) {
    if (m.replica == replica) return &m;
  }
  return nullptr;
}

std::string EncodeShardConfig(const ShardConfig& config) {
  nlohmann::json members = nlohmann::json::array();
  for (const ShardMember& m : config.members) {
    members.push_back({{"replica", m.replica}, {"incarnation", m.incarnation}});
  }
  return nlohmann::json{{"epoch", config.epoch}, {"primary", config.primary}, {"members", members}}
      .dump();
}

Result<ShardConfig> DecodeShardConfig(const std::string& json) {
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    ShardConfig config;
    config.epoch = j.at("epoch").get<uint64_t>();
    config.primary = j.at("primary").get<uint32_t>();
    for (const nlohmann::json& m : j.at("members")) {
      config.members.push_back(
          {m.at("replica").get<uint32_t>(), m.at("incarnation").get<std::string>()});
    }
    if (config.epoch == 0 || config.Find(config.primary) == nullptr) {
      return DataLoss("shard config: epoch 0 or a primary outside the set: " + json);
    }
    return config;
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("shard config: ") + e.what());
  }
}

ShardCoordinator::ShardCoordinator(KvStore* store, Options options)
    : store_(store), options_(std::move(options)), incarnation_(NewIncarnation()) {}

ShardCoordinator::~ShardCoordinator() {
  int64_t lease = 0;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    lease = lease_id_;
  }
  cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  deadline_ns_.store(0);
  if (lease != 0) (void)store_->RevokeLease(lease);  // best effort: else it expires by itself
}

std::string ShardCoordinator::Key(const std::string& name) const {
  return options_.prefix + "/shard/" + std::to_string(options_.shard) + "/" + name;
}

Status ShardCoordinator::Register() {
  const KvPut put{Key("member/" + std::to_string(options_.self)), incarnation_, 0};
  BX_ASSIGN_OR_RETURN(bool done, store_->Commit({}, {&put, 1}));
  return done ? Status::Ok() : Internal("unconditional put refused");
}

Result<std::vector<std::optional<std::string>>> ShardCoordinator::Registered(uint32_t replicas) {
  std::vector<std::optional<std::string>> out;
  for (uint32_t r = 0; r < replicas; ++r) {
    BX_ASSIGN_OR_RETURN(std::optional<KvEntry> entry,
                        store_->Get(Key("member/" + std::to_string(r))));
    out.push_back(entry ? std::optional<std::string>(entry->value) : std::nullopt);
  }
  return out;
}

Result<std::optional<VersionedConfig>> ShardCoordinator::Read() {
  BX_ASSIGN_OR_RETURN(std::optional<KvEntry> entry, store_->Get(Key("config")));
  if (!entry) return std::optional<VersionedConfig>();
  BX_ASSIGN_OR_RETURN(ShardConfig config, DecodeShardConfig(entry->value));
  return std::optional<VersionedConfig>(VersionedConfig{std::move(config), entry->mod_revision});
}

Result<bool> ShardCoordinator::PrimaryLeaseAlive() {
  BX_ASSIGN_OR_RETURN(std::optional<KvEntry> entry, store_->Get(Key("lease")));
  return entry.has_value();
}

Result<KvLease> ShardCoordinator::GrantLease() {
  const Clock::time_point sent = Clock::now();
  BX_ASSIGN_OR_RETURN(KvLease lease, store_->GrantLease(options_.lease_ttl));
  SetDeadline(sent, lease.ttl);
  return lease;
}

void ShardCoordinator::SetDeadline(Clock::time_point sent, std::chrono::milliseconds ttl) {
  const Clock::time_point deadline = sent + ttl - options_.drift_margin;
  deadline_ns_.store(deadline > sent ? Nanos(deadline) : 0);
}

std::optional<VersionedConfig> ShardCoordinator::office() const {
  std::lock_guard lock(mu_);
  if (lease_id_ == 0) return std::nullopt;
  return office_;
}

void ShardCoordinator::Resign() {
  int64_t lease = 0;
  {
    std::lock_guard lock(mu_);
    deadline_ns_.store(0);
    lease = std::exchange(lease_id_, 0);
    office_.reset();
  }
  cv_.notify_all();
  if (lease != 0) (void)store_->RevokeLease(lease);  // best effort: else it expires by itself
}

bool ShardCoordinator::LeaseValid() const {
  const int64_t deadline = deadline_ns_.load();
  return deadline != 0 && Nanos(Clock::now()) < deadline;
}

Result<VersionedConfig> ShardCoordinator::Bootstrap(std::vector<ShardMember> members) {
  std::sort(members.begin(), members.end(),
            [](const ShardMember& a, const ShardMember& b) { return a.replica < b.replica; });
  const ShardConfig config{1, options_.self, std::move(members)};
  if (config.Find(options_.self) == nullptr) {
    return InvalidArgument("bootstrap: the set must hold this replica");
  }
  const KvCompare compares[] = {{Key("config"), KvCompare::Target::kCreate, 0}};
  return CommitOffice(compares, config,
                      "shard " + std::to_string(options_.shard) + " already has a configuration");
}

Result<VersionedConfig> ShardCoordinator::Promote(const VersionedConfig& seen) {
  if (seen.config.Find(options_.self) == nullptr) {
    return FailedPrecondition("replica " + std::to_string(options_.self) + " is not in the set");
  }
  ShardConfig next = seen.config;
  next.epoch += 1;
  next.primary = options_.self;
  // The old primary leaves the set — unless it is this replica: a config can name it whose
  // office it could not take (the store failed right after the commit). It never acted as that
  // primary and holds what every member holds, so it stays (a primary is always a member).
  std::erase_if(next.members, [&](const ShardMember& m) {
    return m.replica == seen.config.primary && m.replica != options_.self;
  });
  const KvCompare compares[] = {{Key("config"), KvCompare::Target::kMod, seen.revision},
                                {Key("lease"), KvCompare::Target::kCreate, 0}};
  return CommitOffice(compares, next,
                      "promotion to epoch " + std::to_string(next.epoch) +
                          " lost: the configuration changed or the primary's lease is alive");
}

Result<VersionedConfig> ShardCoordinator::CommitOffice(std::span<const KvCompare> compares,
                                                       const ShardConfig& config,
                                                       const std::string& refused) {
  BX_ASSIGN_OR_RETURN(KvLease lease, GrantLease());
  const KvPut puts[] = {
      {Key("config"), EncodeShardConfig(config), 0},
      {Key("lease"), std::to_string(options_.self) + " " + std::to_string(config.epoch), lease.id}};
  Result<bool> done = store_->Commit(compares, puts);
  if (!done.ok() || !*done) {
    (void)store_->RevokeLease(lease.id);
    deadline_ns_.store(0);
    if (!done.ok()) return done.status();
    return FailedPrecondition(refused);
  }
  return TakeOffice(lease, config);
}

Result<VersionedConfig> ShardCoordinator::TakeOffice(const KvLease& lease,
                                                     const ShardConfig& config) {
  // Only this lease's holder writes the config while the lease key exists, so what we read
  // now is what we wrote — unless the lease has already expired, which the checks catch.
  Result<std::optional<KvEntry>> key = store_->Get(Key("lease"));
  Result<std::optional<VersionedConfig>> current = Read();
  Status taken;
  if (!key.ok()) {
    taken = key.status();
  } else if (!current.ok()) {
    taken = current.status();
  } else if (!*key || (*key)->lease != lease.id || !*current || (*current)->config != config) {
    taken = FailedPrecondition("lease expired right after taking office");
  }
  if (!taken.ok()) {
    // Nobody renews a lease whose office was not taken: give it back so that the next
    // promotion need not wait for it to expire (best effort: else it expires by itself).
    deadline_ns_.store(0);
    (void)store_->RevokeLease(lease.id);
    return taken;
  }
  {
    std::lock_guard lock(mu_);
    lease_id_ = lease.id;
    lease_key_created_ = (*key)->create_revision;
    office_ = **current;
    if (!renewer_.joinable()) renewer_ = std::thread([this] { RenewLoop(); });
  }
  cv_.notify_all();
  return **current;
}

Result<VersionedConfig> ShardCoordinator::Drop(uint32_t replica) {
  return ChangeMembers("drop replica " + std::to_string(replica), [&](ShardConfig& next) {
    const size_t before = next.members.size();
    std::erase_if(next.members, [&](const ShardMember& m) { return m.replica == replica; });
    if (replica == options_.self || next.members.size() == before) {
      return InvalidArgument("replica " + std::to_string(replica) + " is not a backup in the set");
    }
    return Status::Ok();
  });
}

Result<VersionedConfig> ShardCoordinator::Add(const ShardMember& member) {
  return ChangeMembers("add replica " + std::to_string(member.replica), [&](ShardConfig& next) {
    if (member.replica == options_.self) return InvalidArgument("the primary is in the set");
    std::erase_if(next.members, [&](const ShardMember& m) { return m.replica == member.replica; });
    next.members.push_back(member);
    std::sort(next.members.begin(), next.members.end(),
              [](const ShardMember& a, const ShardMember& b) { return a.replica < b.replica; });
    return Status::Ok();
  });
}

Result<ShardCoordinator::Held> ShardCoordinator::HeldOffice() const {
  Held held;
  {
    std::lock_guard lock(mu_);
    if (!office_ || lease_id_ == 0) return FailedPrecondition("not the primary");
    held.office = *office_;
    held.key_created = lease_key_created_;
  }
  if (!LeaseValid()) return FailedPrecondition("the primary's lease expired");
  return held;
}

std::array<KvCompare, 2> ShardCoordinator::OfficeCompares(const Held& held) const {
  return {KvCompare{Key("config"), KvCompare::Target::kMod, held.office.revision},
          KvCompare{Key("lease"), KvCompare::Target::kCreate, held.key_created}};
}

Status ShardCoordinator::NameSuccessor(uint32_t replica) {
  BX_ASSIGN_OR_RETURN(Held held, HeldOffice());
  if (replica == options_.self || held.office.config.Find(replica) == nullptr) {
    return InvalidArgument("replica " + std::to_string(replica) + " is not a backup in the set");
  }
  // Not bound to the lease: it must outlive the resignation that follows.
  const std::array<KvCompare, 2> compares = OfficeCompares(held);
  const KvPut put{Key("successor"),
                  std::to_string(replica) + " " + std::to_string(held.office.config.epoch), 0};
  BX_ASSIGN_OR_RETURN(bool done, store_->Commit(compares, {&put, 1}));
  if (!done) return FailedPrecondition("the configuration changed or the lease expired");
  return Status::Ok();
}

Result<std::optional<uint32_t>> ShardCoordinator::Successor(uint64_t epoch) {
  BX_ASSIGN_OR_RETURN(std::optional<KvEntry> entry, store_->Get(Key("successor")));
  if (!entry) return std::optional<uint32_t>();
  unsigned long long replica = 0, named_in = 0;
  if (std::sscanf(entry->value.c_str(), "%llu %llu", &replica, &named_in) != 2 ||
      replica > UINT32_MAX) {
    return DataLoss("the store's successor key holds \"" + entry->value + "\"");
  }
  if (named_in != epoch) return std::optional<uint32_t>();
  return std::optional<uint32_t>(static_cast<uint32_t>(replica));
}

Result<VersionedConfig> ShardCoordinator::ChangeMembers(
    const std::string& what, const std::function<Status(ShardConfig&)>& change) {
  BX_ASSIGN_OR_RETURN(Held held, HeldOffice());
  ShardConfig next = held.office.config;
  BX_RETURN_IF_ERROR(change(next));
  const std::array<KvCompare, 2> compares = OfficeCompares(held);
  const KvPut put{Key("config"), EncodeShardConfig(next), 0};
  BX_ASSIGN_OR_RETURN(bool done, store_->Commit(compares, {&put, 1}));
  if (!done) return FailedPrecondition("the configuration changed or the lease expired");
  BX_ASSIGN_OR_RETURN(std::optional<VersionedConfig> current, Read());
  if (!current || current->config != next) {
    return FailedPrecondition("the configuration changed after committing: " + what);
  }
  std::lock_guard lock(mu_);
  office_ = *current;
  return *current;
}

void ShardCoordinator::RenewLoop() {
  std::unique_lock lock(mu_);
  int64_t renewing = 0;  // the lease `next` is for
  Clock::time_point next;
  bool answered = true;  // the last renewal got an answer
  while (true) {
    cv_.wait(lock, [this] { return stop_ || lease_id_ != 0; });
    const int64_t lease = lease_id_;
    if (lease != renewing) {
      renewing = lease;
      next = Clock::now() + options_.lease_ttl / 3;
      answered = true;
    }
    // ttl/3 after the last renewal left, not after its answer: waiting ttl/3 more after one
    // that timed out (a second on etcd) let a 2 s lease expire at the store while the other
    // members would have renewed it.
    cv_.wait_until(lock, next, [&] { return stop_ || lease_id_ != lease; });
    if (stop_) return;
    if (lease_id_ != lease) continue;  // resigned, or lost and replaced: start over
    lock.unlock();
    const Clock::time_point sent = Clock::now();
    next = sent + options_.lease_ttl / 3;
    Result<std::chrono::milliseconds> renewed = store_->KeepAlive(lease);
    lock.lock();
    if (lease_id_ != lease) continue;  // resigned meanwhile: the answer is nobody's
    const bool unanswered = !renewed.ok() && renewed.status().code() != StatusCode::kNotFound;
    if (unanswered && answered && options_.on_renewal_unanswered) {
      lock.unlock();
      options_.on_renewal_unanswered(renewed.status());
      lock.lock();
    }
    answered = !unanswered;
    if (lease_id_ != lease) continue;
    if (renewed.ok()) {
      // The store renewed the lease, so it (and its key) never expired: no successor can
      // exist, and the store's expiry lies past this deadline. So a deadline that had passed
      // (the store did not answer for a while: paused, restarted) may start again.
      const bool lapsed = !LeaseValid();
      SetDeadline(sent, *renewed);
      if (lapsed && LeaseValid() && options_.on_lease_renewed) {
        lock.unlock();
        options_.on_lease_renewed();
        lock.lock();
      }
    } else if (renewed.status().code() == StatusCode::kNotFound) {
      deadline_ns_.store(0);
      lease_id_ = 0;
      office_.reset();
      lock.unlock();
      if (options_.on_lease_lost) options_.on_lease_lost(renewed.status());
      lock.lock();
    }
    // Otherwise the store did not answer: the deadline runs out by itself (the holder stops
    // acting), and the next renewal may find the lease alive or gone.
  }
}

}  // namespace bx::ps
