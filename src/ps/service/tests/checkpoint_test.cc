// Checkpoints of a running cluster and clusters restored from them (docs/PS.md "Checkpoints"),
// over tcp and rdma: taken while trainers push, restored after every server is gone, into the
// same number of shards and into others.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "bx/ps/checkpoint.h"
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

// A directory of this test's own, removed with it.
class CheckpointDir {
 public:
  CheckpointDir()
      : path_(
            std::filesystem::temp_directory_path() /
            ("bx_checkpoint_test." + std::to_string(::getpid()) + "." + std::to_string(next_++))) {
    std::filesystem::remove_all(path_);
  }
  ~CheckpointDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline std::atomic<int> next_{0};
  std::filesystem::path path_;
};

std::vector<float> FetchEveryRow(PsClient& client, std::span<const uint64_t> keys) {
  Result<FetchResult> fetched = client.Fetch(kTable, keys, 30s);
  EXPECT_TRUE(fetched.ok()) << fetched.status().ToString();
  return fetched.ok() ? fetched->values : std::vector<float>{};
}

class CheckpointTest : public ::testing::TestWithParam<std::string> {};

// Two trainers push while the checkpoint is taken; then every server goes. A cluster restored
// from it, with 2, 3 or 1 shards, holds for each trainer's key a count between the pushes
// acknowledged before the checkpoint began and those acknowledged once it ended (plus the one
// in flight), the same count for every key of one push on one shard, the same in every
// restore; every other row as it was; and takes pushes again.
TEST_P(CheckpointTest, ATakenWhileTrainersPushCheckpointRestoresIntoAnyShardCount) {
  CheckpointDir dir;
  const std::vector<uint64_t> rows = testing::SequentialKeys(2000, 1'000'000);
  std::vector<float> rows_before;
  std::vector<int> acked_before, acked_after;
  std::vector<std::vector<uint64_t>> trainer_keys = {testing::SequentialKeys(16, 1),
                                                     testing::SequentialKeys(16, 101)};
  {
    Cluster cluster;
    cluster.min_in_sync = 2;
    ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 2, 2));
    auto client = testing::MakeClient(cluster);
    ASSERT_TRUE(client);
    std::vector<float> gradients(rows.size() * kDim);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& g : gradients) g = uniform(rng);
    // In pieces of 16 keys: a push locks the table stripes its keys fall in, all at once, and
    // TSan's deadlock detector aborts a thread holding more than 64 locks (64 stripes, plus the
    // replica's own two).
    for (size_t first = 0; first < rows.size(); first += 16) {
      const size_t n = std::min<size_t>(16, rows.size() - first);
      ASSERT_TRUE(client
                      ->Push(kTable, kDim, std::span(rows).subspan(first, n),
                             std::span<const float>(gradients).subspan(first * kDim, n * kDim), 30s)
                      .ok());
    }
    rows_before = FetchEveryRow(*client, rows);

    std::vector<std::unique_ptr<testing::OnesTrainer>> trainers;
    for (const auto& keys : trainer_keys)
      trainers.push_back(std::make_unique<testing::OnesTrainer>(*client, keys));
    ASSERT_TRUE(WaitFor([&] { return trainers[0]->acked > 20 && trainers[1]->acked > 20; }, 30s));
    for (auto& t : trainers) acked_before.push_back(t->acked);
    Result<CheckpointManifest> manifest = WriteCheckpoint(cluster.spec, dir.path());
    ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
    for (auto& t : trainers) acked_after.push_back(t->acked);
    ASSERT_TRUE(WaitFor([&] { return trainers[0]->acked > acked_after[0] + 10; }, 30s));
    for (auto& t : trainers) t->Stop();
    ASSERT_EQ(manifest->shards.size(), 2u);
    for (const CheckpointShard& s : manifest->shards) {
      EXPECT_GT(s.lsn, 0u);
      EXPECT_EQ(s.epoch, 1u);
    }
    EXPECT_FALSE(WriteCheckpoint(cluster.spec, dir.path()).ok()) << "a checkpoint overwritten";
    // ps.Stat: each primary offered one checkpoint; both replicas of a shard hold its rows.
    std::vector<ReplicaStats> stats = QueryClusterStats(cluster.spec);
    ASSERT_EQ(stats.size(), 4u);
    for (const ReplicaStats& r : stats) {
      ASSERT_TRUE(r.status.ok()) << r.address << ": " << r.status.ToString();
      ASSERT_EQ(r.tables.size(), 1u);
      EXPECT_EQ(r.role, r.replica == 0 ? "primary" : "backup");
      EXPECT_EQ(r.counters.checkpoints, r.replica == 0 ? 1u : 0u);
      // A primary knows the position it checkpointed last.
      EXPECT_EQ(r.last_checkpoint_lsn, r.replica == 0 ? manifest->shards[r.shard].lsn : 0u);
      EXPECT_EQ(r.last_checkpoint_unix_ms != 0, r.replica == 0);
      EXPECT_EQ(r.tables[0].rows, stats[r.shard * 2].tables[0].rows);
    }
    EXPECT_EQ(stats[0].tables[0].rows + stats[2].tables[0].rows, rows.size() + 32);
  }  // every server gone

  std::vector<float> first_restore;
  for (int shards : {2, 3, 1}) {
    SCOPED_TRACE("restored into " + std::to_string(shards) + " shards");
    Cluster restored;
    restored.restore_from = dir.path();
    ASSERT_NO_FATAL_FAILURE(restored.Start(GetParam(), shards, 2));
    auto client = testing::MakeClient(restored);
    ASSERT_TRUE(client);
    EXPECT_EQ(FetchEveryRow(*client, rows), rows_before);
    uint64_t restored_rows = 0;
    for (const ReplicaStats& r : QueryClusterStats(restored.spec)) {
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      if (r.replica == 0) restored_rows += r.tables.at(0).rows;
    }
    EXPECT_EQ(restored_rows, rows.size() + 32) << "every row once, on the shard that owns it";
    std::vector<float> counts;
    for (size_t t = 0; t < trainer_keys.size(); ++t) {
      const std::vector<float> values = FetchEveryRow(*client, trainer_keys[t]);
      ASSERT_EQ(values.size(), trainer_keys[t].size() * kDim);
      for (size_t k = 0; k < trainer_keys[t].size(); ++k) {
        const float count = -values[k * kDim];
        EXPECT_GE(count, float(acked_before[t])) << "trainer " << t << " key " << k;
        EXPECT_LE(count, float(acked_after[t] + 1)) << "trainer " << t << " key " << k;
        EXPECT_EQ(count, std::round(count));
        counts.push_back(count);
      }
      // A shard's part of a push is applied whole: the checkpoint cut each shard between two.
      for (size_t k = 1; k < trainer_keys[t].size(); ++k) {
        for (size_t j = 0; j < k; ++j) {
          if (ShardOfKey(trainer_keys[t][j], 2) != ShardOfKey(trainer_keys[t][k], 2)) continue;
          EXPECT_EQ(values[j * kDim], values[k * kDim])
              << "trainer " << t << " keys " << j << ", " << k << " of one shard";
        }
      }
    }
    if (first_restore.empty()) {
      first_restore = counts;
    } else {
      EXPECT_EQ(counts, first_restore) << "every restore holds the same checkpoint";
    }
    // The restored cluster takes pushes; each of its replicas started from the same rows.
    const uint64_t key = trainer_keys[0][0];
    ASSERT_NO_FATAL_FAILURE(testing::PushOnes(*client, key, 2));
    const uint32_t shard = ShardOfKey(key, uint32_t(shards));
    EXPECT_EQ(testing::FirstValue(*restored.servers[shard][1], key), -(first_restore[0] + 2));
  }
}

// What is not a checkpoint is refused with a reason: a directory without a manifest (an
// unfinished checkpoint), a restore into a server already serving pushes, or into tables of
// another shape.
TEST_P(CheckpointTest, AnUnfinishedCheckpointOrAMismatchedServerIsRefused) {
  CheckpointDir dir;
  Cluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 1));
  auto client = testing::MakeClient(cluster);
  ASSERT_TRUE(client);
  ASSERT_NO_FATAL_FAILURE(testing::PushOnes(*client, 5, 1));
  ASSERT_TRUE(WriteCheckpoint(cluster.spec, dir.path()).ok());
  // The primary's own state is not replaced: it has served pushes.
  EXPECT_EQ(cluster.servers[0][0]->RestoreFrom(dir.path(), 0, 1).code(),
            StatusCode::kFailedPrecondition);

  Result<std::unique_ptr<PsServer>> wide = PsServer::Create({testing::WideTable(8)});
  ASSERT_TRUE(wide.ok());
  EXPECT_FALSE((*wide)->RestoreFrom(dir.path(), 0, 1).ok()) << "a table of another dim";
  Result<std::unique_ptr<PsServer>> fresh = PsServer::Create({testing::Table()});
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)->RestoreFrom(dir.path(), 1, 1).code(), StatusCode::kInvalidArgument);

  std::filesystem::remove(dir.path() + "/manifest.json");
  Status unfinished = (*fresh)->RestoreFrom(dir.path(), 0, 1);
  EXPECT_EQ(unfinished.code(), StatusCode::kNotFound) << unfinished.ToString();
  EXPECT_EQ(ReadCheckpointManifest(dir.path()).status().code(), StatusCode::kNotFound);
}

// Two checkpoints at once (a periodic one beside a manual one) both complete: the primary does
// not replace a snapshot another caller is still reading. Before, one failed mid-transfer with
// NotFound (seen in checkpoint_restore.sh).
TEST_P(CheckpointTest, TwoCheckpointsAtOnceBothComplete) {
  CheckpointDir first, second;
  Cluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 2, 1));
  auto client = testing::MakeClient(cluster);
  ASSERT_TRUE(client);
  // 16 keys a push, as above: TSan's deadlock detector counts the stripes one push locks.
  const std::vector<float> ones(16 * kDim, 1.0f);
  for (uint64_t key = 1; key <= 4000; key += 16) {
    ASSERT_TRUE(client->Push(kTable, kDim, testing::SequentialKeys(16, key), ones, 30s).ok());
  }
  for (int round = 0; round < 3; ++round) {
    std::filesystem::remove_all(first.path());
    std::filesystem::remove_all(second.path());
    Result<CheckpointManifest> other = Unavailable("not run");
    std::thread beside([&] { other = WriteCheckpoint(cluster.spec, second.path()); });
    Result<CheckpointManifest> mine = WriteCheckpoint(cluster.spec, first.path());
    beside.join();
    EXPECT_TRUE(mine.ok()) << mine.status().ToString();
    EXPECT_TRUE(other.ok()) << other.status().ToString();
  }
}

// The reader asks for several pieces of a snapshot at once, and the primary's workers may answer
// the last before an earlier one. Serving the last piece must not end the snapshot while others
// are unread (it did: the earlier piece got NotFound, and ps_checkpoint_restore failed in CI);
// once every piece has been served, its memory goes back.
TEST_P(CheckpointTest, ThePieceServedLastEndsTheSnapshotNotThePieceAtItsEnd) {
  Cluster cluster;
  cluster.tables = {testing::WideTable(256)};
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 1));
  auto client = testing::MakeClient(cluster);
  ASSERT_TRUE(client);
  const std::vector<float> ones(100 * 256, 1.0f);
  for (uint64_t key = 1; key <= 3000; key += 100) {  // 3 MiB of rows: four pieces
    ASSERT_TRUE(client->Push(kTable, 256, testing::SequentialKeys(100, key), ones, 30s).ok());
  }
  rpc::ClientOptions options;
  options.log = [](std::string_view) {};
  auto raw = rpc::Client::Create({cluster.servers[0][0]->address()}, options);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  rpc::Client& primary = **raw;

  uint64_t token = 0, epoch = 0, lsn = 0, size = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<rpc::Message> ask = U64Message({/*request=*/42, /*durable_ms=*/30'000});
        Result<rpc::Message> offer = CallOnce(primary, kCheckpointMethod, std::move(*ask), 30s);
        return offer.ok() && GetU64s(Bytes(*offer), {&token, &epoch, &lsn, &size});
      },
      30s));
  ASSERT_GT(size, 2 * kJoinChunkBytes);
  auto piece = [&](uint64_t offset) {
    Result<rpc::Message> request = U64Message({token, offset});
    return CallOnce(primary, kCheckpointChunkMethod, std::move(*request), 30s);
  };
  const uint64_t last = (size - 1) / kJoinChunkBytes * kJoinChunkBytes;
  ASSERT_TRUE(piece(last).ok());
  for (uint64_t offset = 0; offset < last; offset += kJoinChunkBytes) {
    Result<rpc::Message> earlier = piece(offset);
    EXPECT_TRUE(earlier.ok()) << offset << ": " << earlier.status().ToString();
  }
  EXPECT_EQ(piece(0).status().code(), StatusCode::kNotFound) << "every piece served: released";
}

INSTANTIATE_TEST_SUITE_P(Transports, CheckpointTest, ::testing::Values("tcp", "rdma"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bx::ps
