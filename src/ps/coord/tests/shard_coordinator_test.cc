// The shard configuration protocol over the in-process store: one primary per epoch, promotion
// only after the old primary's lease is gone at the store, and never while the old primary
// still believes its lease valid.
#include "ps/coord/shard_coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "ps/coord/tests/wait_for.h"

namespace bx::ps {
namespace {

using coord_test::WaitFor;
using namespace std::chrono_literals;

// A store whose lease renewals can be made to fail, as when the holder is paused or cut off
// from the store.
class CutOffStore : public KvStore {
 public:
  explicit CutOffStore(KvStore* inner) : inner_(inner) {}
  Result<std::optional<KvEntry>> Get(const std::string& key) override { return inner_->Get(key); }
  Result<bool> Commit(std::span<const KvCompare> c, std::span<const KvPut> p) override {
    if (cut_) return Unavailable("cut off");
    return inner_->Commit(c, p);
  }
  Result<KvLease> GrantLease(std::chrono::milliseconds ttl) override {
    return inner_->GrantLease(ttl);
  }
  Result<std::chrono::milliseconds> KeepAlive(int64_t lease) override {
    if (cut_) return Unavailable("cut off");
    if (const int64_t ms = hang_next_ms_.exchange(0); ms > 0) {  // taken, never answered
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return DeadlineExceeded("no answer");
    }
    ++keepalives_;
    return inner_->KeepAlive(lease);
  }
  Status RevokeLease(int64_t lease) override {
    if (cut_) return Unavailable("cut off");
    return inner_->RevokeLease(lease);
  }
  std::string Describe() const override { return "cut-off " + inner_->Describe(); }
  std::atomic<bool> cut_{false};
  std::atomic<int> keepalives_{0};        // renewals that reached the store
  std::atomic<int64_t> hang_next_ms_{0};  // the next renewal times out after this long

 private:
  KvStore* inner_;
};

ShardCoordinator::Options Replica(uint32_t self, std::chrono::milliseconds ttl = 600ms) {
  ShardCoordinator::Options o;
  o.prefix = "/test";
  o.shard = 3;
  o.self = self;
  o.lease_ttl = ttl;
  o.drift_margin = ttl / 10;
  return o;
}

std::vector<ShardMember> Members(std::initializer_list<uint32_t> replicas) {
  std::vector<ShardMember> out;
  for (uint32_t r : replicas) out.push_back({r, "inc" + std::to_string(r)});
  return out;
}

TEST(ShardConfig, RoundTripsAndRefusesAPrimaryOutsideTheSet) {
  const ShardConfig config{7, 2, Members({0, 2})};
  Result<ShardConfig> decoded = DecodeShardConfig(EncodeShardConfig(config));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, config);
  EXPECT_EQ(DecodeShardConfig(EncodeShardConfig({7, 1, Members({0, 2})})).status().code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(DecodeShardConfig("{\"epoch\":").status().code(), StatusCode::kDataLoss);
}

TEST(ShardCoordinator, BootstrapHappensOnce) {
  auto store = NewMemoryKvStore();
  ShardCoordinator a(store.get(), Replica(0)), b(store.get(), Replica(1));
  Result<VersionedConfig> first = a.Bootstrap(Members({0, 1}));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->config.epoch, 1u);
  EXPECT_EQ(first->config.primary, 0u);
  EXPECT_TRUE(a.LeaseValid());
  EXPECT_EQ(b.Bootstrap(Members({0, 1})).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(b.LeaseValid());
}

TEST(ShardCoordinator, NoPromotionWhileThePrimarysLeaseIsAlive) {
  auto store = NewMemoryKvStore();
  ShardCoordinator primary(store.get(), Replica(0)), backup(store.get(), Replica(1));
  ASSERT_TRUE(primary.Bootstrap(Members({0, 1, 2})).ok());
  Result<std::optional<VersionedConfig>> seen = backup.Read();
  ASSERT_TRUE(seen.ok() && *seen);
  // Renewals keep it alive across several ttls.
  const auto end = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < end) {
    EXPECT_EQ(backup.Promote(**seen).status().code(), StatusCode::kFailedPrecondition);
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(primary.LeaseValid());
}

TEST(ShardCoordinator, APrimaryCutOffFromTheStoreStopsBeforeItsSuccessorStarts) {
  auto inner = NewMemoryKvStore();
  CutOffStore cut(inner.get());
  std::atomic<bool> lost{false};
  ShardCoordinator::Options po = Replica(0);
  po.on_lease_lost = [&](const Status&) { lost = true; };
  ShardCoordinator primary(&cut, po), backup(inner.get(), Replica(1));
  ASSERT_TRUE(primary.Bootstrap(Members({0, 1, 2})).ok());
  Result<std::optional<VersionedConfig>> seen = backup.Read();
  ASSERT_TRUE(seen.ok() && *seen);
  cut.cut_ = true;
  // The backup retries promotion as fast as it can; whenever it succeeds, the old primary must
  // already have stopped trusting its lease.
  Result<VersionedConfig> promoted = FailedPrecondition("not yet");
  ASSERT_TRUE(WaitFor([&] {
    promoted = backup.Promote(**seen);
    if (promoted.ok()) {
      EXPECT_FALSE(primary.LeaseValid()) << "two primaries trust a lease";
    }
    return promoted.ok();
  }));
  EXPECT_EQ(promoted->config.epoch, 2u);
  EXPECT_EQ(promoted->config.primary, 1u);
  EXPECT_EQ(promoted->config.members, Members({1, 2})) << "the old primary leaves the set";
  EXPECT_FALSE(lost.load()) << "only the store can say the lease is gone";
  cut.cut_ = false;
  EXPECT_TRUE(WaitFor([&] { return lost.load(); })) << "the holder is told it lost the lease";
  EXPECT_FALSE(primary.LeaseValid());
  EXPECT_EQ(primary.Drop(2).status().code(), StatusCode::kFailedPrecondition);
}

// etcd renews every lease when it restarts: a primary whose deadline passed while the store did
// not answer renews its lease once it is back, and stays primary of its epoch.
TEST(ShardCoordinator, ALeaseTheStoreKeptThroughAnOutageIsRenewedNotReElected) {
  auto store = NewMemoryKvStore();
  std::atomic<int> lost{0}, renewed{0};
  ShardCoordinator::Options po = Replica(0);
  po.on_lease_lost = [&](const Status&) { ++lost; };
  po.on_lease_renewed = [&] { ++renewed; };
  ShardCoordinator primary(store.get(), po), backup(store.get(), Replica(1));
  ASSERT_TRUE(primary.Bootstrap(Members({0, 1, 2})).ok());
  ASSERT_TRUE(SetMemoryKvStoreOutage(store.get(), KvOutage::kDown).ok());
  ASSERT_TRUE(WaitFor([&] { return !primary.LeaseValid(); })) << "acting on an unrenewed lease";
  ASSERT_TRUE(SetMemoryKvStoreOutage(store.get(), KvOutage::kRestarted).ok());
  ASSERT_TRUE(WaitFor([&] { return renewed.load() == 1; })) << "the kept lease is not renewed";
  EXPECT_TRUE(primary.LeaseValid());
  EXPECT_EQ(lost.load(), 0);
  Result<std::optional<VersionedConfig>> seen = backup.Read();
  ASSERT_TRUE(seen.ok() && *seen);
  EXPECT_EQ(backup.Promote(**seen).status().code(), StatusCode::kFailedPrecondition);
  Result<VersionedConfig> dropped = primary.Drop(2);
  ASSERT_TRUE(dropped.ok()) << "no longer primary: " << dropped.status().ToString();
  EXPECT_EQ(dropped->config.epoch, 1u);
}

// The same outage, but etcd was paused past the lease: the lease is gone, and only the store
// saying so ends the office; the backup is then promoted.
TEST(ShardCoordinator, ALeaseThatExpiredDuringAnOutageEndsTheOffice) {
  auto store = NewMemoryKvStore();
  std::atomic<int> lost{0}, renewed{0};
  ShardCoordinator::Options po = Replica(0);
  po.on_lease_lost = [&](const Status&) { ++lost; };
  po.on_lease_renewed = [&] { ++renewed; };
  ShardCoordinator primary(store.get(), po), backup(store.get(), Replica(1));
  ASSERT_TRUE(primary.Bootstrap(Members({0, 1, 2})).ok());
  ASSERT_TRUE(SetMemoryKvStoreOutage(store.get(), KvOutage::kDown).ok());
  ASSERT_TRUE(WaitFor([&] { return !primary.LeaseValid(); }));
  EXPECT_EQ(lost.load(), 0);
  ASSERT_TRUE(SetMemoryKvStoreOutage(store.get(), KvOutage::kResumedLate).ok());
  ASSERT_TRUE(WaitFor([&] { return lost.load() == 1; }));
  EXPECT_EQ(renewed.load(), 0);
  EXPECT_FALSE(primary.LeaseValid());
  EXPECT_FALSE(primary.office());
  Result<std::optional<VersionedConfig>> seen = backup.Read();
  ASSERT_TRUE(seen.ok() && *seen);
  EXPECT_TRUE(backup.Promote(**seen).ok());
}

// A replica primary twice in one process renews its second lease too (once only the first
// office had a renewing thread, so every re-elected primary lost its lease one ttl later
// and the shard flapped between two replicas for good).
TEST(ShardCoordinator, EveryOfficeItHoldsIsRenewed) {
  auto inner = NewMemoryKvStore();
  CutOffStore store(inner.get());
  std::atomic<bool> lost{false};
  ShardCoordinator::Options ao = Replica(0);
  ao.on_lease_lost = [&](const Status&) { lost = true; };
  ShardCoordinator a(&store, ao);
  ASSERT_TRUE(a.Bootstrap(Members({0, 1, 2})).ok());
  ASSERT_TRUE(SetMemoryKvStoreOutage(inner.get(), KvOutage::kResumedLate).ok());
  ASSERT_TRUE(WaitFor([&] { return lost.load(); }));
  {
    ShardCoordinator b(inner.get(), Replica(1));
    Result<std::optional<VersionedConfig>> seen = b.Read();
    ASSERT_TRUE(seen.ok() && *seen);
    ASSERT_TRUE(b.Promote(**seen).ok());
    ASSERT_TRUE(b.Add({0, "inc0"}).ok());  // a caught up and joined again
  }                                        // b goes: its lease is revoked
  Result<std::optional<VersionedConfig>> seen = a.Read();
  ASSERT_TRUE(seen.ok() && *seen);
  Result<VersionedConfig> again = a.Promote(**seen);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->config.epoch, 3u);
  const int before = store.keepalives_.load();
  ASSERT_TRUE(WaitFor([&] { return store.keepalives_.load() >= before + 3; }))
      << "the second office's lease is never renewed";
  EXPECT_TRUE(a.LeaseValid());
  EXPECT_TRUE(a.office());
}

// An etcd member that took a renewal and never answered (paused, cut off) costs the call its
// timeout: half a ttl here, as a second is of a 2 s lease. The next renewal leaves at once (the
// store sends it to the next member) and the lease lives on. Waiting ttl/3 more, as the
// keep-alive once did, left the store 1/3 + 1/2 + 1/3 of a ttl without a renewal: lease lost.
TEST(ShardCoordinator, ARenewalLeftUnansweredIsFollowedAtOnce) {
  auto inner = NewMemoryKvStore();
  CutOffStore store(inner.get());
  std::atomic<int> lost{0}, unanswered{0};
  ShardCoordinator::Options po = Replica(0, 3000ms);  // margins of half a second either way
  po.on_lease_lost = [&](const Status&) { ++lost; };
  po.on_renewal_unanswered = [&](const Status&) { ++unanswered; };
  ShardCoordinator primary(&store, po);
  ASSERT_TRUE(primary.Bootstrap(Members({0, 1, 2})).ok());
  store.hang_next_ms_ = 1500;
  ASSERT_TRUE(WaitFor([&] { return unanswered.load() == 1; }));
  const int before = store.keepalives_.load();
  ASSERT_TRUE(WaitFor([&] { return store.keepalives_.load() >= before + 2; }));
  EXPECT_EQ(lost.load(), 0) << "the lease expired at the store between two renewals";
  EXPECT_EQ(unanswered.load(), 1) << "reported once per outage";
  EXPECT_TRUE(primary.LeaseValid());
}

// A config can name as primary a replica that could not take the office (the store failed
// right after its promotion committed). Promoting itself again keeps it in the set.
TEST(ShardCoordinator, ARePromotionOfTheNamedPrimaryKeepsItInTheSet) {
  auto store = NewMemoryKvStore();
  std::optional<VersionedConfig> seen;
  {
    ShardCoordinator orphan(store.get(), Replica(0));
    ASSERT_TRUE(orphan.Bootstrap(Members({0, 1, 2})).ok());
  }  // its lease is revoked: a config naming replica 0 without a lease
  ShardCoordinator again(store.get(), Replica(0));
  Result<std::optional<VersionedConfig>> read = again.Read();
  ASSERT_TRUE(read.ok() && *read);
  Result<VersionedConfig> promoted = again.Promote(**read);
  ASSERT_TRUE(promoted.ok()) << promoted.status().ToString();
  EXPECT_EQ(promoted->config.epoch, 2u);
  EXPECT_EQ(promoted->config.members, Members({0, 1, 2}));
  read = again.Read();
  ASSERT_TRUE(read.ok() && *read) << "the store holds a config it can read back";
}

TEST(ShardCoordinator, OneWinnerPerEpoch) {
  auto store = NewMemoryKvStore();
  std::optional<VersionedConfig> seen;
  {
    ShardCoordinator primary(store.get(), Replica(0));
    ASSERT_TRUE(primary.Bootstrap(Members({0, 1, 2})).ok());
  }  // destroyed: its lease is revoked
  ShardCoordinator b1(store.get(), Replica(1)), b2(store.get(), Replica(2));
  Result<std::optional<VersionedConfig>> read = b1.Read();
  ASSERT_TRUE(read.ok() && *read);
  std::atomic<int> winners{0};
  std::thread t1([&] { winners += b1.Promote(**read).ok(); });
  std::thread t2([&] { winners += b2.Promote(**read).ok(); });
  t1.join();
  t2.join();
  EXPECT_EQ(winners.load(), 1);
  EXPECT_NE(b1.LeaseValid(), b2.LeaseValid());
}

TEST(ShardCoordinator, OnlyTheLeaseHolderDropsAndOnlyFromItsOwnConfig) {
  auto store = NewMemoryKvStore();
  ShardCoordinator primary(store.get(), Replica(0)), backup(store.get(), Replica(1));
  EXPECT_EQ(primary.Drop(1).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(primary.Bootstrap(Members({0, 1, 2})).ok());
  EXPECT_EQ(backup.Drop(2).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(primary.Drop(0).status().code(), StatusCode::kInvalidArgument);
  Result<VersionedConfig> dropped = primary.Drop(2);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(dropped->config.members, Members({0, 1}));
  EXPECT_EQ(dropped->config.epoch, 1u);
  EXPECT_EQ(primary.Drop(2).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShardCoordinator, RegisteredIncarnationsAreFreshPerProcess) {
  auto store = NewMemoryKvStore();
  ShardCoordinator first(store.get(), Replica(1));
  ASSERT_TRUE(first.Register().ok());
  ShardCoordinator restarted(store.get(), Replica(1));
  EXPECT_NE(first.incarnation(), restarted.incarnation());
  ASSERT_TRUE(restarted.Register().ok());
  Result<std::vector<std::optional<std::string>>> registered = first.Registered(3);
  ASSERT_TRUE(registered.ok());
  EXPECT_FALSE((*registered)[0]);
  EXPECT_EQ((*registered)[1], restarted.incarnation());
  EXPECT_FALSE((*registered)[2]);
}

}  // namespace
}  // namespace bx::ps
