// ShardCoordinator: one replica's view of its shard's configuration in a KvStore, and the
// primary's lease (docs/PS.md "Configuration and leases"). Keys, under `prefix`/shard/<s>/:
//
//   member/<r>  the incarnation of the process serving replica r (random, written at start)
//   config      {"epoch", "primary", "members": [{"replica", "incarnation"}...]}: the replica
//               set, changed only by the transactions below
//   lease       "<replica> <epoch>", bound to the primary's lease: it exists exactly while the
//               primary's lease is alive at the store
//   successor   "<replica> <epoch>": the backup the primary of <epoch> handed the shard to (a
//               planned handover); the other backups leave the promotion to it
//
// Transactions (each a compare-and-put on revisions):
//   Bootstrap   config absent                           -> config{1, self, members}, lease key
//   Promote     config unchanged since read, no lease   -> config{epoch + 1, self, set - old}
//   Drop        config unchanged since own last write,  -> config{same epoch, set - dropped}
//               own lease key still the one it created
//   Add         as Drop                                 -> config{same epoch, set + joined}
//   NameSuccessor  as Drop                              -> successor{backup, epoch}
// so epochs come from the store (monotonic, one primary per epoch), a backup is promoted only
// once the old primary's lease has expired at the store, and only a primary whose lease is
// alive changes the set.
//
// The lease: granted with `lease_ttl`, renewed every ttl/3 by a thread of this object (one for
// every office it holds), counted from when the last renewal left: one the store left unanswered
// for longer (a member paused or cut off; the store's next call goes to the next member) is
// followed at once, before the lease can expire at the store. Each renewal is timed from before its
// request left, so the local deadline — send time + granted ttl - drift margin — falls before the
// store's expiry (which counts from when the store got the renewal) as long as the two clocks'
// rates differ by less than the margin. LeaseValid() reads that deadline. When it passes because
// the store does not answer, the holder must stop acting (LeaseValid() is false) but keeps the
// office and keeps renewing: a store that comes back with the lease alive (etcd renews every lease
// when it restarts) renews it, the deadline starts again from that renewal and `on_lease_renewed`
// runs. A renewal accepted by the store proves that the lease — and so its key — lived throughout,
// so no other replica can have been promoted meanwhile. Only the store saying the lease is
// gone ends the office: `on_lease_lost` runs once.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bx/status.h"
#include "ps/coord/kv_store.h"

namespace bx::ps {

struct ShardMember {
  uint32_t replica = 0;     // index in the cluster file's replica list of the shard
  std::string incarnation;  // of the process that joined the set as this replica
  friend bool operator==(const ShardMember&, const ShardMember&) = default;
};

struct ShardConfig {
  uint64_t epoch = 0;
  uint32_t primary = 0;
  std::vector<ShardMember> members;  // the replica set, primary included, by replica

  const ShardMember* Find(uint32_t replica) const;
  friend bool operator==(const ShardConfig&, const ShardConfig&) = default;
};

std::string EncodeShardConfig(const ShardConfig& config);
Result<ShardConfig> DecodeShardConfig(const std::string& json);

struct VersionedConfig {
  ShardConfig config;
  int64_t revision = 0;  // the config key's mod_revision
};

class ShardCoordinator {
 public:
  struct Options {
    std::string prefix = "/bexpress/ps";
    uint32_t shard = 0;
    uint32_t self = 0;
    std::chrono::milliseconds lease_ttl{2000};
    // Subtracted from every lease deadline; covers the difference of clock rates between this
    // host and the store over one ttl (NTP-disciplined clocks differ by far less than 10%).
    std::chrono::milliseconds drift_margin{200};
    // Runs once (on the keep-alive thread) when the store says the lease is gone; the holder
    // must stop acting as primary.
    std::function<void(const Status&)> on_lease_lost;
    // Runs (on the keep-alive thread) when a renewal made a deadline that had passed valid
    // again: the holder may act again (e.g. release the acks it held back).
    std::function<void()> on_lease_renewed;
    // Runs (on the keep-alive thread) when a renewal got no answer after one that did: the
    // first sign of a store outage, once per outage.
    std::function<void(const Status&)> on_renewal_unanswered;
  };

  // `store` must outlive this object. The incarnation is random, fresh for every object.
  ShardCoordinator(KvStore* store, Options options);
  ~ShardCoordinator();  // stops renewing; revokes a held lease so a successor need not wait

  const std::string& incarnation() const { return incarnation_; }

  // Writes member/<self> = incarnation (this process now serves the replica).
  Status Register();
  // The incarnations registered for `replicas` (nullopt for one that has not registered).
  Result<std::vector<std::optional<std::string>>> Registered(uint32_t replicas);

  Result<std::optional<VersionedConfig>> Read();
  // Whether the primary's lease key exists (the primary named in the config is alive).
  Result<bool> PrimaryLeaseAlive();

  // Creates the shard's first configuration: epoch 1, this replica primary, `members` (this one
  // included). FailedPrecondition when a configuration exists.
  Result<VersionedConfig> Bootstrap(std::vector<ShardMember> members);
  // Becomes primary of seen.epoch + 1 with seen's members minus the old primary.
  // FailedPrecondition when `seen` is no longer current or the old primary's lease is alive.
  Result<VersionedConfig> Promote(const VersionedConfig& seen);
  // As the primary holding its lease: removes `replica` from the set. FailedPrecondition when
  // this replica is no longer primary of its config or its lease is gone.
  Result<VersionedConfig> Drop(uint32_t replica);
  // As the primary holding its lease: adds `member` to the set (replacing an entry for the
  // same replica, i.e. an earlier process). Errors as Drop.
  Result<VersionedConfig> Add(const ShardMember& member);
  // As the primary holding its lease: names `replica` (a member) the successor of this epoch,
  // before the primary resigns in a planned handover. Errors as Drop.
  Status NameSuccessor(uint32_t replica);
  // The successor the primary of `epoch` named (nullopt: none, or one named in another epoch).
  Result<std::optional<uint32_t>> Successor(uint64_t epoch);
  // The config this replica last wrote as primary (nullopt when it is not primary).
  std::optional<VersionedConfig> office() const;
  // Gives the office up (a primary that stepped down by itself): stops renewing and revokes the
  // lease, so that a backup can be promoted now instead of never.
  void Resign();

  // True while the lease certainly has not expired at the store.
  bool LeaseValid() const;

 private:
  std::string Key(const std::string& name) const;
  // Grants a lease and starts its deadline (before the grant was sent).
  Result<KvLease> GrantLease();
  // Grants a lease and, if every compare holds, writes `config` and the lease key under it;
  // FailedPrecondition(refused) otherwise.
  Result<VersionedConfig> CommitOffice(std::span<const KvCompare> compares,
                                       const ShardConfig& config, const std::string& refused);
  // After a successful Bootstrap/Promote commit: learns the revisions the next Drop compares
  // with, and starts renewing.
  Result<VersionedConfig> TakeOffice(const KvLease& lease, const ShardConfig& config);
  // The office this primary holds, and its lease key's create revision: FailedPrecondition
  // when it holds none or its lease expired.
  struct Held {
    VersionedConfig office;
    int64_t key_created = 0;
  };
  Result<Held> HeldOffice() const;
  // What a change made under `held` commits on: the config unchanged since this primary wrote
  // it, and its own lease key (same create revision) still there.
  std::array<KvCompare, 2> OfficeCompares(const Held& held) const;
  // As the primary holding its lease: commits office's config changed by `change`.
  Result<VersionedConfig> ChangeMembers(const std::string& what,
                                        const std::function<Status(ShardConfig&)>& change);
  void SetDeadline(std::chrono::steady_clock::time_point sent, std::chrono::milliseconds ttl);
  // Renews whichever lease is held, for the life of this object (idle while none is).
  void RenewLoop();

  KvStore* const store_;
  const Options options_;
  const std::string incarnation_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t lease_id_ = 0;                   // 0: no lease held
  int64_t lease_key_created_ = 0;          // create_revision of our lease key
  std::optional<VersionedConfig> office_;  // the config this replica wrote last as primary
  std::atomic<int64_t> deadline_ns_{0};    // steady clock; 0: no valid lease
  std::thread renewer_;
};

}  // namespace bx::ps
