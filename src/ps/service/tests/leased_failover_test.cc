// Failover through the shard's configuration in a store (LeasedFailoverCore), in one process
// over the in-process store: epoch 1 is created by the initial primary's monitor once every
// replica has registered, a backup is promoted only after the primary's lease is gone, and an
// unreachable backup stops counting only once the primary has committed its removal.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "ps/coord/kv_store.h"
#include "ps/service/tests/ps_test_cluster.h"

namespace bx::ps {
namespace {

using namespace std::chrono_literals;
using rpc::testing::WaitFor;
using testing::OnesTrainer;

class LeasedFailoverTest : public ::testing::TestWithParam<std::string> {
 public:
  // A store of this test run's own (--gtest_repeat too), shared by the cluster's monitors.
  std::string StoreUrl() const {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return std::string("memory://") + info->test_suite_name() + "." + info->name() + "." +
           std::to_string(run_);
  }
  static inline std::atomic<int> runs_{0};
  const int run_ = runs_++;

  FailoverOptions Options(const Cluster& cluster, size_t self, MonitorLog* log) const {
    FailoverOptions options;
    for (const ReplicaSpec& replica : cluster.spec.shards[0].replicas) {
      options.replicas.push_back({replica.rdma, replica.tcp});
    }
    options.self = self;
    options.config_store = StoreUrl();
    options.probe_interval = 20ms;
    options.lease_ttl = 600ms;
    options.client.log = [](std::string_view) {};
    options.log = log->Sink();
    return options;
  }

  // Starts one monitor per replica of shard 0 and waits for replica 0 to be primary of epoch 1.
  void StartMonitors(Cluster& cluster, size_t replicas,
                     std::chrono::milliseconds lease_ttl = std::chrono::milliseconds(0)) {
    logs_ = std::vector<MonitorLog>(replicas);
    for (size_t r = 0; r < replicas; ++r) {
      FailoverOptions options = Options(cluster, r, &logs_[r]);
      if (lease_ttl.count() > 0) options.lease_ttl = lease_ttl;
      Result<std::unique_ptr<FailoverMonitor>> monitor =
          FailoverMonitor::Start(cluster.servers[0][r].get(), std::move(options));
      ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
      // The lease-less detector's state is absent, not a reference through null (the
      // public FailoverMonitor::core() it replaces dereferenced null here).
      EXPECT_EQ(PsInternals::Core(**monitor), nullptr);
      monitors_.push_back(std::move(monitor).value());
    }
    ASSERT_TRUE(WaitFor(
        [&] {
          return PsInternals::Core(*cluster.servers[0][0]).replica().role() ==
                 ShardReplica::Role::kPrimary;
        },
        kWaitLimit))
        << logs_[0].Dump();
  }

  Result<std::optional<VersionedConfig>> Config() const {
    BX_ASSIGN_OR_RETURN(std::shared_ptr<KvStore> store, OpenKvStore(StoreUrl(), 1s));
    ShardCoordinator::Options options;
    options.self = 99;
    return ShardCoordinator(store.get(), options).Read();
  }

  // Declared in this order so that the monitors go first, then the servers they watch.
  Cluster cluster_;
  std::vector<MonitorLog> logs_;
  std::vector<std::unique_ptr<FailoverMonitor>> monitors_;
};

TEST_P(LeasedFailoverTest, EpochOneNeedsEveryReplicaAndPromotionNeedsTheLeaseGone) {
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3));
  Result<std::optional<VersionedConfig>> first = Config();
  ASSERT_TRUE(first.ok() && *first);
  EXPECT_EQ((*first)->config.epoch, 1u);
  EXPECT_EQ((*first)->config.members.size(), 3u);

  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 7, 50));
  // The primary goes away; its monitor's end revokes the lease (a crash would let it expire).
  monitors_[0].reset();
  cluster.servers[0][0]->Stop();
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 7, 50));  // waits for the promotion

  Result<std::optional<VersionedConfig>> second = Config();
  ASSERT_TRUE(second.ok() && *second);
  EXPECT_EQ((*second)->config.epoch, 2u);
  const uint32_t primary = (*second)->config.primary;
  ASSERT_TRUE(primary == 1 || primary == 2);
  EXPECT_EQ((*second)->config.Find(0), nullptr) << "the old primary leaves the set";
  EXPECT_EQ(monitors_[primary]->promoted_epoch(), 2u) << logs_[primary].Dump();
  EXPECT_EQ(monitors_[3 - primary]->promoted_epoch(), 0u) << "one winner per epoch";
  EXPECT_EQ(FirstValue(*cluster.servers[0][primary], 7), -100.0f);
  ASSERT_TRUE(WaitFor([&] { return FirstValue(*cluster.servers[0][3 - primary], 7) == -100.0f; },
                      kWaitLimit));
}

TEST_P(LeasedFailoverTest, AnUnreachableBackupIsDroppedByACommittedChangeAndLeavesService) {
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 9, 20));
  cluster.servers[0][2]->Stop();  // unreachable, but its monitor still thinks it is a member
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 9, 20));  // acked once the drop is committed
  Result<std::optional<VersionedConfig>> config = Config();
  ASSERT_TRUE(config.ok() && *config);
  EXPECT_EQ((*config)->config.epoch, 1u) << "a drop is not a new epoch";
  EXPECT_EQ((*config)->config.Find(2), nullptr);
  EXPECT_TRUE(logs_[0].Contains("dropped unreachable replica 2")) << logs_[0].Dump();
  // Replica 2 learns it is out and tries to catch up; the primary cannot reach it, so it is
  // never added back.
  ASSERT_TRUE(WaitFor([&] { return logs_[2].Contains("not in the shard's set"); }, kWaitLimit))
      << logs_[2].Dump();
  ASSERT_TRUE(WaitFor([&] { return logs_[0].Contains("snapshot for replica 2"); }, kWaitLimit))
      << logs_[0].Dump();
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 9, 5));
  config = Config();
  ASSERT_TRUE(config.ok() && *config);
  EXPECT_EQ((*config)->config.Find(2), nullptr) << "added back while unreachable";
  EXPECT_EQ(FirstValue(*cluster.servers[0][1], 9), -45.0f);
  EXPECT_EQ(FirstValue(*cluster.servers[0][0], 9), -45.0f);
}

// A restarted replica (a new, empty process) catches up from the primary while pushes go on,
// is added to the set, and then holds every acknowledged push: it can take over alone.
TEST_P(LeasedFailoverTest, ARestartedReplicaCatchesUpJoinsAndCanTakeOver) {
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 3, 20));

  monitors_[2].reset();
  ASSERT_NO_FATAL_FAILURE(cluster.Restart(0, 2));
  EXPECT_EQ(FirstValue(*cluster.servers[0][2], 3), 0.0f) << "the new process starts empty";
  Result<std::unique_ptr<FailoverMonitor>> monitor =
      FailoverMonitor::Start(cluster.servers[0][2].get(), Options(cluster, 2, &logs_[2]));
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  monitors_[2] = std::move(monitor).value();
  // Pushes go on while it catches up, until the primary has added it.
  int pushed = 20;
  const auto give_up = std::chrono::steady_clock::now() + kWaitLimit;
  while (!logs_[0].Contains("added caught-up replica 2")) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << logs_[0].Dump() << logs_[2].Dump();
    ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 3, 1));
    ++pushed;
  }
  EXPECT_TRUE(logs_[0].Contains("earlier process is still in the set") ||
              logs_[0].Contains("dropped unreachable replica 2"))
      << "the old process left the set by a committed change first\n"
      << logs_[0].Dump();
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 3, 5));
  pushed += 5;
  Result<std::optional<VersionedConfig>> config = Config();
  ASSERT_TRUE(config.ok() && *config);
  EXPECT_NE((*config)->config.Find(2), nullptr);
  EXPECT_EQ(FirstValue(*cluster.servers[0][2], 3), -static_cast<float>(pushed));

  // Primary and the other backup go: the joiner alone must hold everything acknowledged.
  monitors_[0].reset();
  monitors_[1].reset();
  cluster.servers[0][0]->Stop();
  cluster.servers[0][1]->Stop();
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 3, 1));  // waits for its promotion
  EXPECT_GT(monitors_[2]->promoted_epoch(), 1u) << logs_[2].Dump();
  EXPECT_EQ(FirstValue(*cluster.servers[0][2], 3), -static_cast<float>(pushed + 1));
}

// One store outage as the chaos test's etcd-pause-restart has it: the store stops
// answering for longer than the lease and comes back with its leases expired (a paused etcd:
// the lease is really gone, one promotion), then stops again and comes back with every lease
// renewed (a restarted etcd: the primary renews its lease, nobody is promoted). A trainer
// pushes throughout; every push is acknowledged, and applied once.
TEST_P(LeasedFailoverTest, AStoreOutageCostsAtMostOnePromotion) {
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  // A lease of 3 s, renewed every second: only a stall of 2 s could cost it, which a loaded
  // machine does not reach (at 600 ms, a 400 ms stall of the renewing thread did, under rdma).
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3, 3s));
  Result<std::shared_ptr<KvStore>> store = OpenKvStore(StoreUrl(), 1s);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto outage = [&](KvOutage what) {
    ASSERT_TRUE(SetMemoryKvStoreOutage(store->get(), what).ok());
  };
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  constexpr uint64_t kKey = 4;
  OnesTrainer trainer(*client, kKey);  // stops on every way out, failed assertions too
  auto acked_beyond = [&](int count) {
    return WaitFor([&] { return trainer.acked.load() >= count + 20; }, kWaitLimit);
  };
  auto dump = [&] { return logs_[0].Dump() + logs_[1].Dump() + logs_[2].Dump(); };

  // The pause: the primary's deadline passes, then the store is back without its lease.
  ASSERT_TRUE(acked_beyond(0));
  ShardReplica& first = PsInternals::Core(*cluster.servers[0][0]).replica();
  ASSERT_NO_FATAL_FAILURE(outage(KvOutage::kDown));
  ASSERT_TRUE(WaitFor([&] { return !first.PrimaryWithLease(); }, kWaitLimit));
  ASSERT_NO_FATAL_FAILURE(outage(KvOutage::kResumedLate));
  std::optional<VersionedConfig> config;
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::optional<VersionedConfig>> read = Config();
        if (read.ok() && *read) config = **read;
        return config && config->config.epoch == 2;
      },
      kWaitLimit))
      << dump();
  const uint32_t next = config->config.primary;
  ShardReplica& second = PsInternals::Core(*cluster.servers[0][next]).replica();
  ASSERT_TRUE(WaitFor([&] { return second.PrimaryWithLease(); }, kWaitLimit)) << dump();
  ASSERT_TRUE(acked_beyond(trainer.acked.load())) << dump();
  // The deposed primary back in the set first: a change in flight when the store goes down
  // has an unknown outcome, and its primary steps down (a promotion this test does not count;
  // docs/PS.md "When the store pauses or restarts").
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::optional<VersionedConfig>> read = Config();
        return read.ok() && *read && (**read).config.members.size() == 3;
      },
      kWaitLimit))
      << dump();

  // The restart: down past the new primary's deadline, back with every lease renewed.
  ASSERT_NO_FATAL_FAILURE(outage(KvOutage::kDown));
  ASSERT_TRUE(WaitFor([&] { return !second.PrimaryWithLease(); }, kWaitLimit));
  const int before = trainer.acked.load();
  ASSERT_NO_FATAL_FAILURE(outage(KvOutage::kRestarted));
  ASSERT_TRUE(WaitFor([&] { return second.PrimaryWithLease(); }, kWaitLimit))
      << "the primary gave up a lease the store kept\n"
      << dump();
  ASSERT_TRUE(acked_beyond(before)) << dump();
  trainer.Stop();

  Result<std::optional<VersionedConfig>> last = Config();
  ASSERT_TRUE(last.ok() && *last);
  EXPECT_EQ((*last)->config.epoch, 2u) << "one promotion for one outage\n" << dump();
  EXPECT_TRUE(logs_[next].Contains("lease renewed after the store came back")) << dump();
  EXPECT_EQ(FirstValue(*cluster.servers[0][next], kKey), -static_cast<float>(trainer.acked.load()))
      << "every acknowledged push, applied once";
}

// min_in_sync 2 of 3 (the cluster file's default for 3 replicas): with both backups gone, a push
// is not acknowledged by the primary alone; the client keeps retrying it, and once a backup has
// come back and caught up it is acknowledged, applied once. The control, min_in_sync 1, has the
// primary acknowledge alone what its crash would then lose.
void BothBackupsStop(LeasedFailoverTest* test, Cluster& cluster, size_t min_in_sync) {
  cluster.min_in_sync = min_in_sync;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(test->GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(test->StartMonitors(cluster, 3));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 5, 10));
  for (int r : {1, 2}) {
    test->monitors_[r].reset();
    cluster.servers[0][r]->Stop();
  }
  std::atomic<bool> done{false};
  Status pushed;
  std::thread pusher([&] {
    const std::vector<float> ones(kDim, 1.0f);
    const uint64_t key = 5;
    pushed = client->Push(kTable, kDim, {&key, 1}, ones, 60s);
    done = true;
  });
  ShardReplica& primary = PsInternals::Core(*cluster.servers[0][0]).replica();
  if (min_in_sync == 1) {
    EXPECT_TRUE(WaitFor([&] { return done.load(); }, kWaitLimit));
    pusher.join();
    EXPECT_TRUE(pushed.ok()) << "the control acknowledges on the primary alone: "
                             << pushed.ToString();
    EXPECT_EQ(primary.in_sync_replicas(), 1u);
    return;
  }
  // Both drops are committed and the retried push has been refused again and again.
  ASSERT_TRUE(WaitFor([&] { return primary.in_sync_replicas() == 1; }, kWaitLimit))
      << test->logs_[0].Dump();
  ASSERT_TRUE(
      WaitFor([&] { return done || primary.below_min_in_sync_refusals() >= 20; }, kWaitLimit));
  ASSERT_FALSE(done.load()) << "acknowledged with only the primary holding it: "
                            << pushed.ToString();
  // The backups come back as new processes, catch up and join.
  for (int r : {1, 2}) {
    ASSERT_NO_FATAL_FAILURE(cluster.Restart(0, r));
    Result<std::unique_ptr<FailoverMonitor>> monitor = FailoverMonitor::Start(
        cluster.servers[0][r].get(), test->Options(cluster, r, &test->logs_[r]));
    ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
    test->monitors_[r] = std::move(monitor).value();
  }
  pusher.join();
  ASSERT_TRUE(pushed.ok()) << pushed.ToString() << "\n" << test->logs_[0].Dump();
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 5, 2));
  EXPECT_EQ(FirstValue(*cluster.servers[0][0], 5), -13.0f) << "every acknowledged push, once";
  EXPECT_GE(primary.in_sync_replicas(), 2u);
  EXPECT_GT(cluster.servers[0][0]->counters().pushes_below_min_in_sync, 0u);
}

TEST_P(LeasedFailoverTest, BelowMinInSyncThePrimaryAcknowledgesNothingUntilABackupCatchesUp) {
  BothBackupsStop(this, cluster_, 2);
}

TEST_P(LeasedFailoverTest, WithMinInSyncOneThePrimaryAcknowledgesAlone) {
  BothBackupsStop(this, cluster_, 1);
}

// Pushes of 64 MiB (a dim-256 table, 65,536 rows each) while a trainer pushes small ones: the
// backups keep up (a forward's deadline grows with the bytes queued on its link), none is
// dropped, and after the primary is killed the new one holds every acknowledged push.
TEST_P(LeasedFailoverTest, LargePushesKeepTheirBackupsAndSurviveThePrimary) {
  Cluster& cluster = cluster_;
  constexpr uint32_t kWide = 2, kWideDim = 256, kRows = 65536;
  cluster.tables.push_back(testing::WideTable(kWideDim, kWide));
  cluster.min_in_sync = 2;
  // A margin for this host, not the default's: under ctest -j2 beside the other suites a 64 MiB
  // push over the simnic (whose copies take this CPU) was acknowledged in 13 s, the forward to a
  // backup slower than 16 MiB/s, and the backup was dropped. 4 MiB/s: 16 s for 64 MiB.
  cluster.slowest_transfer_bytes_per_second = size_t{4} << 20;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);

  OnesTrainer trainer(*client, 3);  // small pushes beside the large ones
  const std::vector<uint64_t> keys = testing::SequentialKeys(kRows, 1000);
  const std::vector<float> gradients(size_t{kRows} * kWideDim, 1.0f);
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    Status s = client->Push(kWide, kWideDim, keys, gradients, 60s);
    ASSERT_TRUE(s.ok()) << "64 MiB push " << i << ": " << s.ToString();
    std::printf("64 MiB push %d acknowledged in %.0f ms\n", i,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
  }
  trainer.Stop();
  ShardReplica& primary = PsInternals::Core(*cluster.servers[0][0]).replica();
  EXPECT_EQ(primary.live_backups(), 2u) << logs_[0].Dump();
  EXPECT_FALSE(logs_[0].Contains("dropped unreachable replica")) << logs_[0].Dump();

  // The primary dies; whoever takes over holds every acknowledged push, large and small.
  monitors_[0].reset();
  cluster.servers[0][0]->Stop();
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 3, 1));  // waits for the promotion
  size_t next = 0;
  for (size_t r : {1, 2}) {
    if (PsInternals::Core(*cluster.servers[0][r]).replica().role() == ShardReplica::Role::kPrimary)
      next = r;
  }
  ASSERT_NE(next, 0u) << "no replica took over";
  EXPECT_EQ(FirstValue(*cluster.servers[0][next], 3), -static_cast<float>(trainer.acked + 1));
  std::vector<std::byte> row(kWideDim * sizeof(float));
  for (uint64_t key : {keys.front(), keys.back()}) {
    ASSERT_TRUE(
        PsInternals::Core(*cluster.servers[0][next]).replica().Fetch(kWide, {&key, 1}, row).ok());
    float first;
    std::memcpy(&first, row.data(), sizeof first);
    EXPECT_EQ(first, -3.0f) << "key " << key;
  }
}

// Epochs from the store only: forwards from epochs the store never committed (the next one,
// and the highest accepted), sent straight to a backup while a trainer pushes, are refused; the
// backup keeps its epoch, the primary stays primary and acknowledges every push, and the
// replicas agree. Before, the backup moved to the forged epoch and the real primary, fenced by
// its next forward, left its shard refusing pushes.
TEST_P(LeasedFailoverTest, AForwardFromAnEpochTheStoreNeverCommittedIsRefused) {
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 5, 3));
  OnesTrainer trainer(*client, 6);
  PsServer& backup = *cluster.servers[0][1];
  rpc::ClientOptions forger_options;
  forger_options.log = [](std::string_view) {};
  auto forger = rpc::Client::Create({backup.address()}, forger_options);
  ASSERT_TRUE(forger.ok());
  RpcBackupLink link(std::shared_ptr<rpc::Client>(std::move(forger).value()), 5s, 0);
  for (uint64_t epoch : {uint64_t{2}, ShardReplica::kMaxEpoch}) {
    const Status refused = SendForgedForward(link, epoch, /*key=*/9);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << epoch << ": " << refused.ToString();
  }
  EXPECT_EQ(PsInternals::Core(backup).replica().position().epoch, 1u) << "the backup moved";
  ASSERT_TRUE(WaitFor([&] { return trainer.acked.load() >= 50; }, kWaitLimit));
  trainer.Stop();
  ShardReplica& primary = PsInternals::Core(*cluster.servers[0][0]).replica();
  EXPECT_EQ(primary.role(), ShardReplica::Role::kPrimary) << logs_[0].Dump();
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 6, 1));  // durable on both backups once acked
  for (size_t r : {1, 2}) {
    EXPECT_EQ(FirstValue(*cluster.servers[0][r], 6), FirstValue(*cluster.servers[0][0], 6));
    EXPECT_EQ(FirstValue(*cluster.servers[0][r], 9), FirstValue(*cluster.servers[0][0], 9))
        << "the forged push was applied on replica " << r;
  }
}

// A replica out of service refuses reads; the client asks another replica, so no fetch fails.
// A backup that refuses the primary's forwards as if a newer epoch existed, when the store
// names none (here it was told to refuse epochs below 5: a stale or buggy replica) does not
// depose the primary: the primary checks with the store by dropping it, and stays primary of
// epoch 1. Before this check the primary stepped down at once, and the shard moved to epoch 2.
TEST_P(LeasedFailoverTest, ABackupClaimingAnUncommittedEpochIsDroppedNotObeyed) {
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 15, 10));
  PsInternals::Core(*cluster.servers[0][2]).replica().RefuseEpochsBelow(5);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 15, 10));
  EXPECT_TRUE(logs_[0].Contains("dropped unreachable replica 2")) << logs_[0].Dump();
  Result<std::optional<VersionedConfig>> config = Config();
  ASSERT_TRUE(config.ok() && *config);
  EXPECT_EQ((*config)->config.epoch, 1u) << logs_[0].Dump();
  EXPECT_EQ((*config)->config.primary, 0u);
  EXPECT_EQ((*config)->config.Find(2), nullptr);
  EXPECT_EQ(PsInternals::Core(*cluster.servers[0][0]).replica().role(),
            ShardReplica::Role::kPrimary);
  EXPECT_EQ(FirstValue(*cluster.servers[0][1], 15), -20.0f);
}

TEST_P(LeasedFailoverTest, FetchesPassOverAReplicaThatRefusesReads) {
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, 5, 10));
  PsInternals::Core(*cluster.servers[0][2]).replica().StepDown("test: out of service");
  const uint64_t key = 5;
  // At least 60 fetches, and on until the refusing replica has been asked: the client spreads
  // reads over the replicas it sees up, and on a loaded machine its link to replica 2 may come
  // up only after the first ones. Every fetch must succeed either way.
  const auto give_up = std::chrono::steady_clock::now() + kWaitLimit;
  for (int i = 0; i < 60 || cluster.servers[0][2]->counters().fetches == 0; ++i) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "the refusing replica was never tried";
    Result<FetchResult> fetched = client->Fetch(kTable, {&key, 1}, 10s);
    ASSERT_TRUE(fetched.ok()) << "fetch " << i << ": " << fetched.status().ToString();
    EXPECT_EQ(fetched->values[0], -10.0f);
  }
}

// A planned handover (docs/PS.md "Planned handover") while a trainer pushes: the primary gives
// the shard to the backup it names, which promotes itself without waiting out the 5 s lease
// (the lower-numbered backup, which holds as much, leaves it the promotion); nothing
// acknowledged is lost or applied twice, and the old primary rejoins as a backup.
TEST_P(LeasedFailoverTest, APlannedHandoverMovesTheShardWithoutWaitingOutTheLease) {
  constexpr auto kLease = 5000ms;
  constexpr uint64_t kKey = 11;
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3, kLease));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, kKey, 20));
  // Refused where it cannot be done: asked of a backup, to the primary itself, to no replica.
  EXPECT_EQ(monitors_[1]->HandOver().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(monitors_[0]->HandOver(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(monitors_[0]->HandOver(7).status().code(), StatusCode::kInvalidArgument);

  std::atomic<bool> stop{false};
  std::atomic<int> acked{0};
  std::atomic<int64_t> longest_us{0};
  std::thread trainer([&] {
    const std::vector<float> ones(kDim, 1.0f);
    while (!stop) {
      const auto sent = std::chrono::steady_clock::now();
      Status s = client->Push(kTable, kDim, {&kKey, 1}, ones, 60s);
      if (!s.ok()) {
        ADD_FAILURE() << "push: " << s.ToString();
        return;
      }
      const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - sent)
                             .count();
      if (us > longest_us) longest_us = us;
      ++acked;
    }
  });
  ASSERT_TRUE(WaitFor([&] { return acked >= 20; }, kWaitLimit));
  Result<HandoverResult> handed = monitors_[0]->HandOver(2, 10s);
  ASSERT_TRUE(handed.ok()) << handed.status().ToString() << logs_[0].Dump();
  EXPECT_EQ(handed->successor, 2u);
  EXPECT_EQ(handed->epoch, 1u);
  const int at_handover = acked;
  ASSERT_TRUE(WaitFor([&] { return acked >= at_handover + 20; }, kWaitLimit)) << logs_[2].Dump();
  stop = true;
  trainer.join();

  Result<std::optional<VersionedConfig>> config = Config();
  ASSERT_TRUE(config.ok() && *config);
  EXPECT_EQ((*config)->config.epoch, 2u);
  EXPECT_EQ((*config)->config.primary, 2u);
  EXPECT_EQ(monitors_[2]->promoted_epoch(), 2u) << logs_[2].Dump();
  EXPECT_EQ(monitors_[1]->promoted_epoch(), 0u) << logs_[1].Dump();
  EXPECT_TRUE(logs_[2].Contains("promoted as the successor")) << logs_[2].Dump();
  EXPECT_LT(longest_us.load(), std::chrono::microseconds(kLease).count() / 2)
      << "the shard waited for the lease";
  const float expected = -static_cast<float>(20 + acked);
  EXPECT_EQ(FirstValue(*cluster.servers[0][2], kKey), expected);
  ASSERT_TRUE(
      WaitFor([&] { return FirstValue(*cluster.servers[0][1], kKey) == expected; }, kWaitLimit));
  // The old primary catches up and is added back as a backup of epoch 2.
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::optional<VersionedConfig>> c = Config();
        return c.ok() && *c && (*c)->config.Find(0) != nullptr;
      },
      kWaitLimit))
      << logs_[0].Dump() << logs_[2].Dump();
  EXPECT_EQ(FirstValue(*cluster.servers[0][0], kKey), expected);
}

// The successor a handover names may never take over (its monitor is gone here): the other
// backup leaves it the promotion for one lease, then promotes itself, and nothing is lost.
TEST_P(LeasedFailoverTest, ANamedSuccessorThatNeverTakesOverIsReplacedAfterALease) {
  constexpr uint64_t kKey = 13;
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 3, {}, /*promote=*/false));
  ASSERT_NO_FATAL_FAILURE(StartMonitors(cluster, 3, 1500ms));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, kKey, 20));
  monitors_[2].reset();  // replica 2 still serves, as a backup holding every push
  Result<HandoverResult> handed = monitors_[0]->HandOver(2, 10s);
  ASSERT_TRUE(handed.ok()) << handed.status().ToString() << logs_[0].Dump();
  const auto resigned = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(PushOnes(*client, kKey, 5));  // waits for replica 1's promotion
  const auto waited = std::chrono::steady_clock::now() - resigned;
  EXPECT_TRUE(logs_[1].Contains("leaving the promotion to it")) << logs_[1].Dump();
  EXPECT_TRUE(logs_[1].Contains("promoted after the primary's lease expired")) << logs_[1].Dump();
  EXPECT_GE(waited, 1500ms) << "replica 1 did not leave the successor its lease";
  Result<std::optional<VersionedConfig>> config = Config();
  ASSERT_TRUE(config.ok() && *config);
  EXPECT_EQ((*config)->config.epoch, 2u);
  EXPECT_EQ((*config)->config.primary, 1u);
  EXPECT_EQ(FirstValue(*cluster.servers[0][1], kKey), -25.0f);
}

TEST_P(LeasedFailoverTest, ALeasedMonitorNeedsATtlAboveItsProbes) {
  Cluster& cluster = cluster_;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 2, {}, /*promote=*/false));
  MonitorLog log;
  FailoverOptions options = Options(cluster, 0, &log);
  options.lease_ttl = 2 * options.probe_interval;
  EXPECT_EQ(FailoverMonitor::Start(cluster.servers[0][0].get(), options).status().code(),
            StatusCode::kInvalidArgument);
  options = Options(cluster, 0, &log);
  options.config_store = "https://127.0.0.1:1";
  EXPECT_EQ(FailoverMonitor::Start(cluster.servers[0][0].get(), options).status().code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, LeasedFailoverTest, ::testing::Values("tcp", "rdma"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bx::ps
