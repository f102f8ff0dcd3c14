// KvStore: the same cases against the in-process store and a real etcd (their semantics are one:
// kv_store.h), then what only the etcd client has — bad and unreachable endpoints, timeouts.
// Leases are real time: every wait is on a condition with a generous deadline.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "etcd_process.h"
#include "ps/coord/kv_store.h"
#include "ps/coord/tests/wait_for.h"

namespace bx::ps {
namespace {

using coord_test::EtcdProcess;
using coord_test::WaitFor;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Per-request timeout of the etcd client: generous, a loaded machine can stall etcd's fsyncs.
constexpr milliseconds kEtcdTimeout{10000};

// One etcd for every test of the process (ctest runs each test in its own process anyway).
EtcdProcess* SharedEtcd(std::string* error) {
  static Result<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start();
  if (!etcd.ok()) {
    *error = etcd.status().ToString();
    return nullptr;
  }
  return etcd->get();
}

enum class Backend { kMemory, kEtcd };

class KvStoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    static std::atomic<int> run{0};  // keys unique across tests sharing one etcd
    prefix_ = std::string("/bx-test/") +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/" +
              std::to_string(run++) + "/";
    if (GetParam() == Backend::kMemory) {
      store_ = NewMemoryKvStore();
      short_ttl_ = milliseconds(500);
      return;
    }
    std::string error;
    EtcdProcess* etcd = SharedEtcd(&error);
    ASSERT_NE(etcd, nullptr) << error;
    Result<std::unique_ptr<KvStore>> store = OpenEtcdKvStore(etcd->endpoint(), kEtcdTimeout);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    short_ttl_ = seconds(1);  // etcd grants at least its minimum TTL (2 s by default)
  }

  std::string Key(const std::string& name) const { return prefix_ + name; }

  std::optional<KvEntry> MustGet(const std::string& key) {
    Result<std::optional<KvEntry>> e = store_->Get(key);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? e.value() : std::nullopt;
  }

  // Puts unconditionally; the new mod_revision (0 on failure).
  int64_t Put(const std::string& key, const std::string& value, int64_t lease = 0) {
    const KvPut put{key, value, lease};
    Result<bool> done = store_->Commit({}, std::span(&put, 1));
    EXPECT_TRUE(done.ok() && *done) << done.status().ToString();
    std::optional<KvEntry> e = MustGet(key);
    return e ? e->mod_revision : 0;
  }

  // The value of `key`, or "<absent>".
  std::string ValueOf(const std::string& key) {
    std::optional<KvEntry> e = MustGet(key);
    return e ? e->value : "<absent>";
  }

  bool Gone(const std::string& key) {
    Result<std::optional<KvEntry>> e = store_->Get(key);
    return e.ok() && !e->has_value();
  }

  std::unique_ptr<KvStore> store_;
  milliseconds short_ttl_{0};
  std::string prefix_;
};

TEST_P(KvStoreTest, GetOfAnAbsentKeyIsNullopt) {
  Result<std::optional<KvEntry>> e = store_->Get(Key("absent"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_FALSE(e->has_value());
  EXPECT_FALSE(store_->Describe().empty());
}

TEST_P(KvStoreTest, CreateIfAbsentSucceedsOnce) {
  const std::string k = Key("k");
  const KvCompare absent{k, KvCompare::Target::kCreate, 0};
  const KvPut first{k, "v1"};
  Result<bool> created = store_->Commit(std::span(&absent, 1), std::span(&first, 1));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_TRUE(*created);
  std::optional<KvEntry> e = MustGet(k);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->value, "v1");
  EXPECT_GT(e->create_revision, 0);
  EXPECT_EQ(e->mod_revision, e->create_revision);
  EXPECT_EQ(e->lease, 0);

  const KvPut second{k, "v2"};
  Result<bool> again = store_->Commit(std::span(&absent, 1), std::span(&second, 1));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(*again);
  std::optional<KvEntry> after = MustGet(k);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->value, "v1");
  EXPECT_EQ(after->mod_revision, e->mod_revision);
}

TEST_P(KvStoreTest, ModRevisionCasNeedsTheCurrentRevision) {
  const std::string k = Key("k");
  const int64_t r1 = Put(k, "v1");
  ASSERT_GT(r1, 0);

  const KvCompare at_r1{k, KvCompare::Target::kMod, r1};
  const KvPut v2{k, "v2"};
  Result<bool> swapped = store_->Commit(std::span(&at_r1, 1), std::span(&v2, 1));
  ASSERT_TRUE(swapped.ok() && *swapped) << swapped.status().ToString();
  std::optional<KvEntry> e = MustGet(k);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->value, "v2");
  EXPECT_GT(e->mod_revision, r1);
  EXPECT_EQ(e->create_revision, r1);

  // A stale revision, and one from the future: nothing changes.
  for (int64_t wrong : {r1, e->mod_revision + 100}) {
    const KvCompare stale{k, KvCompare::Target::kMod, wrong};
    const KvPut v3{k, "v3"};
    Result<bool> refused = store_->Commit(std::span(&stale, 1), std::span(&v3, 1));
    ASSERT_TRUE(refused.ok()) << refused.status().ToString();
    EXPECT_FALSE(*refused) << "revision " << wrong;
    std::optional<KvEntry> same = MustGet(k);
    ASSERT_TRUE(same.has_value());
    EXPECT_EQ(same->value, "v2");
    EXPECT_EQ(same->mod_revision, e->mod_revision);
  }

  // mod_revision 0 means "absent" too.
  const KvCompare absent{Key("other"), KvCompare::Target::kMod, 0};
  Result<bool> holds = store_->Commit(std::span(&absent, 1), {});
  ASSERT_TRUE(holds.ok() && *holds) << holds.status().ToString();
}

TEST_P(KvStoreTest, MultiPutCommitIsAtomic) {
  const std::string a = Key("a"), b = Key("b");
  const std::vector<KvPut> both = {{a, "a1"}, {b, "b1"}};
  Result<bool> done = store_->Commit({}, both);
  ASSERT_TRUE(done.ok() && *done) << done.status().ToString();
  std::optional<KvEntry> ea = MustGet(a), eb = MustGet(b);
  ASSERT_TRUE(ea && eb);
  EXPECT_EQ(ea->mod_revision, eb->mod_revision);  // one revision for the whole commit
  EXPECT_EQ(ea->create_revision, eb->create_revision);

  // One compare fails: neither key changes.
  const std::vector<KvCompare> one_stale = {{a, KvCompare::Target::kMod, ea->mod_revision},
                                            {b, KvCompare::Target::kMod, eb->mod_revision - 1}};
  const std::vector<KvPut> again = {{a, "a2"}, {b, "b2"}, {Key("c"), "c2"}};
  Result<bool> refused = store_->Commit(one_stale, again);
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_FALSE(*refused);
  EXPECT_EQ(ValueOf(a), "a1");
  EXPECT_EQ(ValueOf(b), "b1");
  EXPECT_TRUE(Gone(Key("c")));

  const std::vector<KvCompare> current = {{a, KvCompare::Target::kMod, ea->mod_revision},
                                          {b, KvCompare::Target::kCreate, eb->create_revision}};
  Result<bool> swapped = store_->Commit(current, again);
  ASSERT_TRUE(swapped.ok() && *swapped) << swapped.status().ToString();
  std::optional<KvEntry> na = MustGet(a), nb = MustGet(b), nc = MustGet(Key("c"));
  ASSERT_TRUE(na && nb && nc);
  EXPECT_EQ(na->value, "a2");
  EXPECT_EQ(nb->value, "b2");
  EXPECT_GT(na->mod_revision, ea->mod_revision);
  EXPECT_EQ(na->mod_revision, nb->mod_revision);
  EXPECT_EQ(na->mod_revision, nc->mod_revision);
  EXPECT_EQ(nc->create_revision, nc->mod_revision);
}

TEST_P(KvStoreTest, RevisionsIncrease) {
  const std::string a = Key("a"), b = Key("b");
  const int64_t r1 = Put(a, "1");
  const int64_t r2 = Put(b, "1");
  const int64_t r3 = Put(a, "2");
  EXPECT_GT(r1, 1);  // the store starts at revision 1: a write makes a later one
  EXPECT_GT(r2, r1);
  EXPECT_GT(r3, r2);
  std::optional<KvEntry> e = MustGet(a);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->create_revision, r1);  // an overwrite keeps the creation
  EXPECT_EQ(e->mod_revision, r3);
}

TEST_P(KvStoreTest, KeysAndValuesAreBytes) {
  std::string key = Key(std::string("bin\0\x01\xff\x80", 7));
  std::string value;
  for (int i = 0; i < 256; ++i) value += char(i);
  for (const std::string& v : {value, std::string(), std::string("x"), std::string("xy")}) {
    Put(key, v);
    std::optional<KvEntry> e = MustGet(key);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->value, v);
  }
  EXPECT_TRUE(Gone(Key(std::string("bin\0\x01\xff", 6))));  // a prefix is another key
}

TEST_P(KvStoreTest, RejectsEmptyKeysAndAKeyPutTwice) {
  Result<std::optional<KvEntry>> e = store_->Get("");
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << e.status().ToString();
  const std::vector<KvPut> twice = {{Key("k"), "1"}, {Key("k"), "2"}};
  Result<bool> done = store_->Commit({}, twice);
  EXPECT_EQ(done.status().code(), StatusCode::kInvalidArgument) << done.status().ToString();
  EXPECT_TRUE(Gone(Key("k")));
  Result<KvLease> lease = store_->GrantLease(milliseconds(0));
  EXPECT_EQ(lease.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(KvStoreTest, LeasedKeyDisappearsWhenTheLeaseExpires) {
  const std::string k = Key("k");
  const auto start = Clock::now();
  Result<KvLease> lease = store_->GrantLease(short_ttl_);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_GT(lease->id, 0);
  EXPECT_GE(lease->ttl, short_ttl_);
  Put(k, "v", lease->id);
  std::optional<KvEntry> e = MustGet(k);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->lease, lease->id);

  ASSERT_TRUE(WaitFor([&] { return Gone(k); }, lease->ttl + seconds(15)))
      << "the key outlived its lease of " << lease->ttl.count() << " ms";
  EXPECT_GE(Clock::now() - start, lease->ttl) << "the lease ended early";
  // Its deletion was a write: the next one has a later revision still.
  EXPECT_GE(Put(Key("after"), "v"), e->mod_revision + 2);
}

TEST_P(KvStoreTest, KeepAliveKeepsTheLeaseAcrossSeveralTtls) {
  const std::string k = Key("k");
  Result<KvLease> lease = store_->GrantLease(short_ttl_);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const auto start = Clock::now();
  Put(k, "v", lease->id);
  int renewals = 0;
  while (Clock::now() - start < 2.5 * lease->ttl) {
    Result<milliseconds> ttl = store_->KeepAlive(lease->id);
    ASSERT_TRUE(ttl.ok()) << ttl.status().ToString() << " after " << renewals << " renewals";
    EXPECT_EQ(*ttl, lease->ttl);
    ++renewals;
    ASSERT_FALSE(Gone(k)) << "after " << renewals << " renewals";
    std::this_thread::sleep_for(lease->ttl / 10);  // the renewal cadence, well inside the ttl
  }
  EXPECT_GT(renewals, 2);
  EXPECT_TRUE(store_->RevokeLease(lease->id).ok());
}

TEST_P(KvStoreTest, KeepAliveAfterExpiryIsNotFound) {
  const std::string k = Key("k");
  Result<KvLease> lease = store_->GrantLease(short_ttl_);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  Put(k, "v", lease->id);
  // Only the key shows that the lease has ended: a KeepAlive would renew it.
  ASSERT_TRUE(WaitFor([&] { return Gone(k); }, lease->ttl + seconds(15)));
  Result<milliseconds> ttl = store_->KeepAlive(lease->id);
  EXPECT_EQ(ttl.status().code(), StatusCode::kNotFound) << ttl.status().ToString();
  EXPECT_TRUE(store_->RevokeLease(lease->id).ok());  // already gone: fine
}

TEST_P(KvStoreTest, RevokeDeletesTheLeasesKeysAtOnce) {
  Result<KvLease> lease = store_->GrantLease(seconds(60));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const std::vector<KvPut> puts = {
      {Key("a"), "1", lease->id}, {Key("b"), "2", lease->id}, {Key("free"), "3"}};
  Result<bool> done = store_->Commit({}, puts);
  ASSERT_TRUE(done.ok() && *done) << done.status().ToString();
  // A key put again without the lease leaves it.
  const int64_t r = Put(Key("b"), "unbound");
  ASSERT_TRUE(MustGet(Key("b")).has_value());
  EXPECT_EQ(MustGet(Key("b"))->lease, 0);

  Status revoked = store_->RevokeLease(lease->id);
  ASSERT_TRUE(revoked.ok()) << revoked.ToString();
  EXPECT_TRUE(Gone(Key("a")));
  EXPECT_FALSE(Gone(Key("b")));
  EXPECT_FALSE(Gone(Key("free")));
  EXPECT_GE(Put(Key("after"), "v"), r + 2);  // the revoke's delete took a revision

  revoked = store_->RevokeLease(lease->id);
  EXPECT_TRUE(revoked.ok()) << revoked.ToString();
  Result<milliseconds> ttl = store_->KeepAlive(lease->id);
  EXPECT_EQ(ttl.status().code(), StatusCode::kNotFound) << ttl.status().ToString();
}

TEST_P(KvStoreTest, CommitUnderARevokedOrUnknownLeaseChangesNothing) {
  Result<KvLease> lease = store_->GrantLease(seconds(60));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(store_->RevokeLease(lease->id).ok());
  const int64_t unknown = lease->id + 1000000;
  for (int64_t id : {lease->id, unknown}) {
    const KvCompare absent{Key("x"), KvCompare::Target::kCreate, 0};
    const std::vector<KvPut> puts = {{Key("plain"), "1"}, {Key("x"), "2", id}};
    Result<bool> done = store_->Commit(std::span(&absent, 1), puts);
    EXPECT_EQ(done.status().code(), StatusCode::kNotFound) << done.status().ToString();
    EXPECT_TRUE(Gone(Key("plain")));
    EXPECT_TRUE(Gone(Key("x")));
  }
  // As in etcd, the lease is looked at only when the compares hold: otherwise plain false.
  const KvCompare fails{Key("x"), KvCompare::Target::kMod, 12345};
  const KvPut put{Key("x"), "1", unknown};
  Result<bool> refused = store_->Commit(std::span(&fails, 1), std::span(&put, 1));
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_FALSE(*refused);
}

TEST_P(KvStoreTest, ConcurrentCasIncrementsAreNotLost) {
  const std::string k = Key("counter");
  constexpr int kThreads = 4, kEach = 10;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int done = 0; done < kEach;) {
        Result<std::optional<KvEntry>> e = store_->Get(k);
        if (!e.ok()) {
          ++errors;
          return;
        }
        const int64_t rev = e->has_value() ? (*e)->mod_revision : 0;
        const int n = e->has_value() ? std::stoi((*e)->value) : 0;
        const KvCompare unchanged{k, KvCompare::Target::kMod, rev};
        const KvPut next{k, std::to_string(n + 1)};
        Result<bool> swapped = store_->Commit(std::span(&unchanged, 1), std::span(&next, 1));
        if (!swapped.ok()) {
          ++errors;
          return;
        }
        done += *swapped;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  std::optional<KvEntry> e = MustGet(k);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->value, std::to_string(kThreads * kEach));
}

INSTANTIATE_TEST_SUITE_P(Stores, KvStoreTest, ::testing::Values(Backend::kMemory, Backend::kEtcd),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param == Backend::kMemory ? "Memory" : "Etcd";
                         });

// --- one store only ---

TEST(MemoryKvStoreTest, LeaseIdsStartAtOneAndAreNotReused) {
  std::unique_ptr<KvStore> store = NewMemoryKvStore();
  Result<KvLease> first = store->GrantLease(milliseconds(1));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->id, 1);
  EXPECT_EQ(first->ttl, milliseconds(1));  // no rounding
  ASSERT_TRUE(WaitFor([&] { return !store->KeepAlive(1).ok(); }));
  Result<KvLease> second = store->GrantLease(seconds(5));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->id, 2);
  EXPECT_EQ(store->Describe(), "in-process");
}

TEST(EtcdKvStoreTest, BadEndpointsAreInvalidArgument) {
  for (const char* endpoint :
       {"", "127.0.0.1:2379", "http://", "http://127.0.0.1", "http://127.0.0.1:", "http://:2379",
        "http://127.0.0.1:http", "http://127.0.0.1:70000", "http://127.0.0.1:2379/v3",
        "http://user@127.0.0.1:2379", "http://::1:2379", "unix:///tmp/etcd.sock"}) {
    Result<std::unique_ptr<KvStore>> store = OpenEtcdKvStore(endpoint, seconds(1));
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << "'" << endpoint << "'";
  }
  Result<std::unique_ptr<KvStore>> tls = OpenEtcdKvStore("https://127.0.0.1:2379", seconds(1));
  EXPECT_EQ(tls.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tls.status().message().find("https is not supported"), std::string::npos)
      << tls.status().ToString();
  EXPECT_FALSE(OpenEtcdKvStore("http://127.0.0.1:2379", milliseconds(0)).ok());

  for (const char* good : {"http://127.0.0.1:2379", "http://etcd.local:2379/", "http://[::1]:1"}) {
    Result<std::unique_ptr<KvStore>> store = OpenEtcdKvStore(good, seconds(1));
    ASSERT_TRUE(store.ok()) << good << ": " << store.status().ToString();
    EXPECT_EQ((*store)->Describe().rfind("etcd http://", 0), 0u) << (*store)->Describe();
  }
}

TEST(EtcdKvStoreTest, MemberListsAreCheckedMemberByMember) {
  for (const char* endpoints :
       {"http://127.0.0.1:2379,", ",http://127.0.0.1:2379", "http://127.0.0.1:2379,,http://b:1",
        "http://127.0.0.1:2379,127.0.0.1:2380", "http://127.0.0.1:2379,http://127.0.0.1:2379/"}) {
    Result<std::unique_ptr<KvStore>> store = OpenEtcdKvStore(endpoints, seconds(1));
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << "'" << endpoints << "'";
  }
  Result<std::unique_ptr<KvStore>> three =
      OpenEtcdKvStore("http://a:1,http://b:2/,http://[::1]:3", seconds(1));
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_EQ((*three)->Describe(), "etcd http://a:1,http://b:2,http://[::1]:3");
}

// A member that refuses connections (killed) is passed over within the same call, and later
// calls go to the member that answered.
TEST(EtcdKvStoreTest, ADeadMemberIsPassedOver) {
  std::string error;
  EtcdProcess* etcd = SharedEtcd(&error);
  ASSERT_NE(etcd, nullptr) << error;
  Result<int> port = coord_test::PickFreePort();  // nothing listens there
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  const std::string dead = "http://127.0.0.1:" + std::to_string(*port);
  Result<std::unique_ptr<KvStore>> store =
      OpenEtcdKvStore(dead + "," + etcd->endpoint(), kEtcdTimeout);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const KvPut put{"dead-member-key", "v"};
  Result<bool> committed = (*store)->Commit({}, std::span<const KvPut>(&put, 1));
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_TRUE(*committed);
  Result<std::optional<KvEntry>> entry = (*store)->Get("dead-member-key");
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  ASSERT_TRUE(entry->has_value());
  EXPECT_EQ((*entry)->value, "v");
}

TEST(EtcdKvStoreTest, UnreachableEndpointFailsFastWithUnavailable) {
  Result<int> port = coord_test::PickFreePort();  // nothing listens there
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(*port);
  Result<std::unique_ptr<KvStore>> store = OpenEtcdKvStore(endpoint, seconds(30));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto start = Clock::now();
  Result<std::optional<KvEntry>> e = (*store)->Get("k");
  EXPECT_LT(Clock::now() - start, seconds(10)) << "a refused connection waited for the timeout";
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable) << e.status().ToString();
  EXPECT_NE(e.status().message().find(endpoint), std::string::npos) << e.status().ToString();
  EXPECT_EQ((*store)->KeepAlive(1).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*store)->RevokeLease(1).code(), StatusCode::kUnavailable);
}

TEST(EtcdKvStoreTest, GrantRoundsTheTtlUpToWholeSeconds) {
  std::string error;
  EtcdProcess* etcd = SharedEtcd(&error);
  ASSERT_NE(etcd, nullptr) << error;
  Result<std::unique_ptr<KvStore>> store = OpenEtcdKvStore(etcd->endpoint(), kEtcdTimeout);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (milliseconds asked : {milliseconds(1), milliseconds(1000), milliseconds(2500)}) {
    Result<KvLease> lease = (*store)->GrantLease(asked);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    EXPECT_GE(lease->ttl, asked);
    EXPECT_EQ(lease->ttl % seconds(1), milliseconds(0)) << lease->ttl.count();
    RecordProperty("granted_ms_for_" + std::to_string(asked.count()), int(lease->ttl.count()));
    EXPECT_TRUE((*store)->RevokeLease(lease->id).ok());
  }
}

TEST(EtcdKvStoreTest, PausedEtcdMakesCallsTimeOut) {
  Result<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start();  // its own: it is paused
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  constexpr milliseconds kTimeout{1000};
  Result<std::unique_ptr<KvStore>> store = OpenEtcdKvStore((*etcd)->endpoint(), kTimeout);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  KvStore& kv = **store;
  ASSERT_TRUE(WaitFor([&] { return kv.Get("k").ok(); }));  // warm (the connection is pooled)

  ASSERT_TRUE((*etcd)->Pause().ok());
  const auto start = Clock::now();
  Result<std::optional<KvEntry>> e = kv.Get("k");
  const auto took = Clock::now() - start;
  EXPECT_EQ(e.status().code(), StatusCode::kDeadlineExceeded) << e.status().ToString();
  EXPECT_NE(e.status().message().find((*etcd)->endpoint()), std::string::npos);
  EXPECT_GE(took, kTimeout * 9 / 10);
  EXPECT_LT(took, kTimeout + seconds(10));
  const KvPut put{"k", "v"};
  Result<bool> done = kv.Commit({}, std::span(&put, 1));  // its outcome would be unknown
  EXPECT_EQ(done.status().code(), StatusCode::kDeadlineExceeded) << done.status().ToString();

  ASSERT_TRUE((*etcd)->Resume().ok());
  EXPECT_TRUE(WaitFor([&] { return kv.Get("k").ok(); }));
}

}  // namespace
}  // namespace bx::ps
