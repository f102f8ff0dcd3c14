// A serving cluster following a training cluster (docs/PS.md "Serving sync"), over tcp and
// rdma: the lag while trainers push, equality (evicted rows gone) once they stop, pushes
// refused, and no fetch ever seeing a shard half-synced (with the non-atomic control).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "bx/ps/serving_sync.h"
#include "bx/ps/stats.h"
#include "ps/service/ps_service.h"
#include "ps/service/tests/ps_test_cluster.h"

namespace bx::ps {
namespace {

using namespace std::chrono_literals;
using rpc::testing::WaitFor;
using testing::Cluster;
using testing::kDim;
using testing::kTable;

// One ServingSync per serving server, as every `bx ps serve --follow` runs one.
std::vector<std::unique_ptr<ServingSync>> Follow(Cluster& serving, const Cluster& training,
                                                 std::chrono::milliseconds every) {
  std::vector<std::unique_ptr<ServingSync>> syncs;
  for (size_t s = 0; s < serving.servers.size(); ++s) {
    for (auto& server : serving.servers[s]) {
      ServingSyncOptions options;
      options.training = training.spec;
      options.shard = uint32_t(s);
      options.shard_count = uint32_t(serving.servers.size());
      options.every = every;
      options.client.log = [](std::string_view) {};
      Result<std::unique_ptr<ServingSync>> sync = ServingSync::Start(server.get(), options);
      EXPECT_TRUE(sync.ok()) << sync.status().ToString();
      if (sync.ok()) syncs.push_back(std::move(sync).value());
    }
  }
  return syncs;
}

class ServingSyncTest : public ::testing::TestWithParam<std::string> {};

// A trainer pushes new keys through a bounded table (so rows are evicted) while the serving
// cluster follows at the default interval: its lag stays under 2 s. Once the trainer stops,
// every serving replica ends at the training primary's position with the same rows (digest and
// count: evicted rows gone), and a push to the serving cluster is refused.
TEST_P(ServingSyncTest, FollowsWithinTwoSecondsAndEndsEqualWithEvictedRowsGone) {
  TableConfig bounded = testing::Table();
  bounded.max_rows = 300;
  Cluster training, serving;
  training.tables = serving.tables = {bounded};
  serving.follower = true;
  ASSERT_NO_FATAL_FAILURE(training.Start(GetParam(), 2, 2));
  ASSERT_NO_FATAL_FAILURE(serving.Start(GetParam(), 2, 2));
  auto syncs = Follow(serving, training, ServingSyncOptions{}.every);
  auto trainer = testing::MakeClient(training);
  ASSERT_TRUE(trainer);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> pushed{0};
  std::thread push_thread([&] {
    for (uint64_t first = 1; !stop.load(); first += 16) {
      const std::vector<uint64_t> keys = testing::SequentialKeys(16, first);
      const std::vector<float> gradients(keys.size() * kDim, 1.0f);
      if (trainer->Push(kTable, kDim, keys, gradients, 10s).ok()) pushed.fetch_add(1);
    }
  });
  // Lag sampled while the trainer pushes, over at least three syncs of each serving primary.
  uint64_t max_lag_ms = 0;
  const bool synced_thrice = WaitFor(
      [&] {
        bool all = true;
        for (const ReplicaStats& r : QueryClusterStats(serving.spec)) {
          EXPECT_TRUE(r.status.ok()) << r.status.ToString();
          EXPECT_TRUE(r.follower);
          if (r.role != "primary") continue;
          if (r.syncs_applied > 0) max_lag_ms = std::max(max_lag_ms, r.sync_lag_ms);
          all = all && r.syncs_applied >= 3;
        }
        return all;
      },
      60s);
  stop = true;
  push_thread.join();
  ASSERT_TRUE(synced_thrice);
  EXPECT_GT(pushed.load(), 0u);
  EXPECT_LT(max_lag_ms, 2000u);
  std::fprintf(stderr, "max sync lag while pushing: %llu ms\n", (unsigned long long)max_lag_ms);

  // After the trainer stops, one more sync brings every serving replica to the training
  // primary's position, with the training primary's rows.
  std::vector<ReplicaStats> train_stats;
  const bool caught_up = WaitFor(
      [&] {
        train_stats = QueryClusterStats(training.spec, 3s, {}, /*digests=*/true);
        const std::vector<ReplicaStats> serve_stats =
            QueryClusterStats(serving.spec, 3s, {}, /*digests=*/true);
        for (const ReplicaStats& r : serve_stats) {
          const ReplicaStats& t = train_stats[r.shard * 2];  // replica 0: the training primary
          if (!r.status.ok() || !t.status.ok() || r.synced_epoch != t.epoch ||
              r.synced_lsn != t.lsn || r.tables.size() != 1 ||
              r.tables[0].digest != t.tables[0].digest || r.tables[0].rows != t.tables[0].rows) {
            return false;
          }
        }
        return true;
      },
      60s);
  EXPECT_TRUE(caught_up);
  uint64_t evicted = 0;
  for (const ReplicaStats& t : train_stats) evicted += t.tables.empty() ? 0 : t.tables[0].evicted;
  EXPECT_GT(evicted, 0u) << "the trainer must have evicted rows for the test to mean anything";
  // The oldest key was evicted on training: serving reads its initial value (0), as training does.
  auto reader = testing::MakeClient(serving);
  ASSERT_TRUE(reader);
  Result<FetchResult> oldest = reader->Fetch(kTable, std::vector<uint64_t>{1}, 10s);
  ASSERT_TRUE(oldest.ok()) << oldest.status().ToString();
  EXPECT_EQ(oldest->values[0], 0.0f);

  Status refused =
      reader->Push(kTable, kDim, std::vector<uint64_t>{1}, std::vector<float>(kDim, 1.0f), 10s);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("training cluster"), std::string::npos);
}

// Every push adds the same to all 256 keys of a one-shard table, so the training shard at any
// position holds one value in every row. A reader of the serving cluster fetches all 256 at
// once, again and again, while syncs land every 20 ms: with the sync applied whole it never sees
// two values. The control (sync_visible_whole = false: rows applied one by one, no lock) shows
// the reader can see a half-applied sync: it must, within the time limit.
void RunHalfSyncedReader(const std::string& scheme, bool visible_whole, uint64_t* torn,
                         uint64_t* fetches, uint64_t* syncs_applied) {
  const TableConfig table = testing::WideTable(1);
  Cluster training, serving;
  training.tables = serving.tables = {table};
  serving.follower = true;
  serving.sync_visible_whole = visible_whole;
  ASSERT_NO_FATAL_FAILURE(training.Start(scheme, 1, 1));
  ASSERT_NO_FATAL_FAILURE(serving.Start(scheme, 1, 2));
  auto syncs = Follow(serving, training, 20ms);
  auto trainer = testing::MakeClient(training);
  auto reader = testing::MakeClient(serving);
  ASSERT_TRUE(trainer && reader);
  const std::vector<uint64_t> keys = testing::SequentialKeys(256);
  std::atomic<bool> stop{false};
  std::thread push_thread([&] {
    const std::vector<float> gradients(keys.size(), -1.0f);
    while (!stop.load()) (void)trainer->Push(kTable, 1, keys, gradients, 10s);
  });
  auto& replica = PsInternals::Core(*serving.servers[0][0]).replica();
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    Result<FetchResult> got = reader->Fetch(kTable, keys, 10s);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ++*fetches;
    for (float v : got->values) {
      if (v != got->values[0]) {
        ++*torn;
        break;
      }
    }
    *syncs_applied = replica.syncs_applied();
    // Enough: 50 syncs seen whole, or (the control) the first half-synced fetch.
    if (visible_whole ? *syncs_applied >= 50 : *torn > 0) break;
  }
  stop = true;
  push_thread.join();
}

TEST_P(ServingSyncTest, AFetchNeverSeesAShardHalfSynced) {
  uint64_t torn = 0, fetches = 0, applied = 0;
  ASSERT_NO_FATAL_FAILURE(RunHalfSyncedReader(GetParam(), true, &torn, &fetches, &applied));
  EXPECT_GE(applied, 50u);
  EXPECT_EQ(torn, 0u) << "of " << fetches << " fetches";
}

TEST_P(ServingSyncTest, ControlWithoutTheSyncLockAFetchSeesAShardHalfSynced) {
  uint64_t torn = 0, fetches = 0, applied = 0;
  ASSERT_NO_FATAL_FAILURE(RunHalfSyncedReader(GetParam(), false, &torn, &fetches, &applied));
  EXPECT_GT(torn, 0u) << fetches << " fetches over " << applied << " syncs saw none half-applied";
}

INSTANTIATE_TEST_SUITE_P(Transports, ServingSyncTest, ::testing::Values("tcp", "rdma"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bx::ps
