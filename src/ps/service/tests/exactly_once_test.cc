// The dedup record against clients that are many, quiet, or hostile, over
// tcp:// and rdma:// in one process: a flood of client ids never makes a retry apply twice, an
// evicted client is told to start a new session, and nobody pushes under another's id.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <mutex>

#include "base/sanitizer_build.h"
#include "ps/service/tests/ps_test_cluster.h"

namespace bx::ps {
namespace {

using namespace std::chrono_literals;
using namespace bx::ps::testing;

uint64_t NowGeneration() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A push of gradient -1 on `key` (its row's value goes up by 1 when applied), with its id.
PushRequest RawPush(uint64_t client_id, uint64_t sequence, uint64_t client_key, uint64_t key) {
  PushRequest push;
  push.id = {client_id, sequence};
  push.client_key = client_key;
  push.table_id = kTable;
  push.dim = kDim;
  push.keys = {key};
  push.gradients.assign(kDim, -1.0f);
  return push;
}

Result<PushAck> PushRaw(PsClient& client, const PushRequest& push) {
  std::promise<Result<PushAck>> promise;
  PsInternals::Core(client).PushToShard(0, push, 10s,
                                        [&](Result<PushAck> ack) { promise.set_value(ack); });
  return promise.get_future().get();
}

// `count` one-off (or, with `pushes_each` 2, repeat) clients pushing key `key`, with up to 64
// pushes in flight; returns the seconds each tenth of them took. Client i's generation is
// `generation` + 1 + i / 100, as if 100 clients started per second: an eviction raises the
// shard's floor above the evicted client's generation, and a client of the same second would
// then have to start a new session (these raw pushes cannot).
std::vector<double> Flood(PsClient& client, uint64_t generation, uint64_t count,
                          uint64_t pushes_each, uint64_t key) {
  std::mutex mu;
  std::condition_variable cv;
  size_t in_flight = 0;
  std::vector<double> tenths;
  auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < count; ++i) {
    for (uint64_t s = 1; s <= pushes_each; ++s) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return in_flight < 64; });
      ++in_flight;
      lock.unlock();
      PsInternals::Core(client).PushToShard(
          0, RawPush((generation + 1 + i / 100) << 32 | i, s, i, key), 30s,
          [&](Result<PushAck> ack) {
            EXPECT_TRUE(ack.ok() && !ack->session_expired && !ack->duplicate)
                << (ack.ok() ? "expired or duplicate" : ack.status().ToString());
            std::lock_guard guard(mu);
            --in_flight;
            cv.notify_all();
          });
    }
    if ((i + 1) % (count / 10) == 0) {
      auto now = std::chrono::steady_clock::now();
      tenths.push_back(std::chrono::duration<double>(now - start).count());
      start = now;
    }
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return in_flight == 0; });
  return tenths;
}

class ExactlyOnceTest : public ::testing::TestWithParam<std::string> {};

// 100,000 one-off client ids (the flood was 66,000) against the default record of
// 65,536: the flood evicts its own kind, so a quiet trainer's retry is still a duplicate and its
// next push is applied; the per-push cost does not grow with the record (the old eviction
// scanned every client per push: 49-68 us became 1.9 ms). Sanitized builds keep the ratio at a
// twentieth of the size.
TEST_P(ExactlyOnceTest, AFloodOfOneOffClientIdsLeavesAQuietClientsRecordIntact) {
  const uint64_t flood = kSanitizerBuild ? 5000 : 100000;
  Cluster cluster;
  cluster.max_dedup_clients = kSanitizerBuild ? 3277 : 65536;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 2));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  const uint64_t generation = NowGeneration();
  const uint64_t quiet = generation << 32 | 0xffff0001u;
  for (uint64_t s = 1; s <= 5; ++s) {
    Result<PushAck> ack = PushRaw(*client, RawPush(quiet, s, 777, 1));
    ASSERT_TRUE(ack.ok() && !ack->duplicate) << s;
  }
  const std::vector<double> tenths = Flood(*client, generation, flood, 1, 2);
  std::printf("flood of %llu one-off ids: seconds per tenth %s\n",
              static_cast<unsigned long long>(flood),
              [&] {
                std::string out;
                for (double t : tenths) out += std::to_string(t).substr(0, 5) + " ";
                return out;
              }()
                  .c_str());
  PsServerCounters counters = cluster.servers[0][0]->counters();
  EXPECT_EQ(counters.dedup_clients, cluster.max_dedup_clients);
  EXPECT_EQ(counters.dedup_evictions, flood + 1 - cluster.max_dedup_clients);

  Result<PushAck> retry = PushRaw(*client, RawPush(quiet, 3, 777, 1));
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_TRUE(retry->duplicate) << "the quiet client is still known";
  Result<PushAck> next = PushRaw(*client, RawPush(quiet, 6, 777, 1));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_FALSE(next->duplicate || next->session_expired);
  EXPECT_EQ(FirstValue(*cluster.servers[0][0], 1), 6.0f);
  EXPECT_EQ(FirstValue(*cluster.servers[0][1], 1), 6.0f);
  EXPECT_EQ(FirstValue(*cluster.servers[0][0], 2), static_cast<float>(flood));
}

// A record of 1,000 and 1,200 clients that push twice each: the quiet client is evicted. Its
// retry of an applied push is refused, on the primary and, after a failover, on the backup
// (whose record evicted the same clients), never applied again; a library client whose
// session was evicted starts a new one and goes on.
TEST_P(ExactlyOnceTest, AnEvictedClientsRetryIsRefusedNeverAppliedTwice) {
  Cluster cluster;
  cluster.max_dedup_clients = 1000;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 2));
  auto client = MakeClient(cluster);
  ASSERT_TRUE(client);
  auto trainer = MakeClient(cluster);
  ASSERT_TRUE(trainer);
  const std::vector<uint64_t> key3 = {3};
  const std::vector<float> minus_one(kDim, -1.0f);
  ASSERT_TRUE(trainer->Push(kTable, kDim, key3, minus_one, 10s).ok());
  ASSERT_TRUE(trainer->Push(kTable, kDim, key3, minus_one, 10s).ok());

  const uint64_t generation = NowGeneration();
  const uint64_t quiet = generation << 32 | 0xffff0001u;
  for (uint64_t s = 1; s <= 5; ++s) ASSERT_TRUE(PushRaw(*client, RawPush(quiet, s, 777, 1)).ok());
  Flood(*client, generation, 1200, 2, 2);
  EXPECT_GT(cluster.servers[0][0]->counters().dedup_evictions, 200u);
  // The trainer's session was evicted too: its next push starts a new one and is applied.
  ASSERT_TRUE(trainer->Push(kTable, kDim, key3, minus_one, 10s).ok());
  EXPECT_EQ(trainer->stats().session_renewals, 1u);
  EXPECT_NE(PsInternals::Core(*trainer).session(0).client_id, trainer->client_id());

  for (int replica : {0, 1}) {
    SCOPED_TRACE(replica == 0 ? "primary" : "backup promoted");
    if (replica == 1) {
      cluster.servers[0][0]->Stop();
      ASSERT_TRUE(cluster.servers[0][1]->BecomePrimary(2, {}).ok());
    }
    Result<PushAck> retry = PushRaw(*client, RawPush(quiet, 3, 777, 1));
    ASSERT_FALSE(retry.ok()) << "a retry of an evicted client must not be acknowledged";
    EXPECT_EQ(retry.status().code(), StatusCode::kFailedPrecondition) << retry.status().ToString();
    EXPECT_NE(retry.status().message().find("no longer knows this client's session"),
              std::string::npos)
        << retry.status().ToString();
    EXPECT_FALSE(PushRaw(*client, RawPush(quiet, 6, 777, 1)).ok()) << "nor a new push";
    EXPECT_EQ(FirstValue(*cluster.servers[0][replica], 1), 5.0f) << "5 pushes applied once each";
    EXPECT_GT(cluster.servers[0][replica]->counters().pushes_session_refused, 0u);
  }
  // The new session came through the failover: no second renewal.
  ASSERT_TRUE(trainer->Push(kTable, kDim, key3, minus_one, 10s).ok());
  EXPECT_EQ(trainer->stats().session_renewals, 1u);
  EXPECT_EQ(FirstValue(*cluster.servers[0][1], 3), 4.0f);
}

// Another authenticated client pushes under a trainer's id: refused and not applied; the
// trainer's own pushes are neither refused nor taken for duplicates.
TEST_P(ExactlyOnceTest, NoClientPushesUnderAnotherClientsId) {
  Cluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 2, "cluster-secret"));
  auto trainer = MakeClient(cluster);
  auto intruder = MakeClient(cluster);
  ASSERT_TRUE(trainer && intruder);
  const std::vector<uint64_t> key = {9};
  const std::vector<float> minus_one(kDim, -1.0f);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(trainer->Push(kTable, kDim, key, minus_one, 10s).ok());
  const PsClientCore::Session victim = PsInternals::Core(*trainer).session(0);
  for (uint64_t s = victim.last_sequence + 1; s <= victim.last_sequence + 10; ++s) {
    Result<PushAck> ack = PushRaw(*intruder, RawPush(victim.client_id, s, victim.key ^ 1, 9));
    EXPECT_FALSE(ack.ok()) << "a push under another client's id must be refused";
  }
  Result<PushAck> old = PushRaw(*intruder, RawPush(victim.client_id, 1, 0, 9));
  EXPECT_FALSE(old.ok()) << "even a replay of an applied push";
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(trainer->Push(kTable, kDim, key, minus_one, 10s).ok());
  EXPECT_EQ(trainer->stats().session_renewals, 0u);
  EXPECT_EQ(cluster.servers[0][0]->counters().pushes_duplicate, 0u);
  EXPECT_EQ(FirstValue(*cluster.servers[0][0], 9), 20.0f);
  EXPECT_EQ(FirstValue(*cluster.servers[0][1], 9), 20.0f);
}

// A trainer restarted with the same fixed client id (ctr_train.py's 1000 + index) used to have
// its new pushes taken for duplicates of its old ones and silently dropped: its new key now
// makes the shard refuse the old session, and the client starts a new one.
TEST_P(ExactlyOnceTest, ARestartedClientWithAFixedIdIsNotTakenForItsPredecessor) {
  Cluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.Start(GetParam(), 1, 2));
  PsClientOptions options;
  options.transport = cluster.spec.transport;
  options.client_id = 1000;
  options.rpc.log = [](std::string_view) {};
  const std::vector<uint64_t> key = {5};
  const std::vector<float> minus_one(kDim, -1.0f);
  for (int run = 1; run <= 2; ++run) {
    Result<std::unique_ptr<PsClient>> client = PsClient::Create(cluster.spec, options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE((*client)->Push(kTable, kDim, key, minus_one, 10s).ok());
    }
    EXPECT_EQ((*client)->stats().session_renewals, run == 1 ? 0u : 1u);
    EXPECT_EQ(FirstValue(*cluster.servers[0][0], 5), 5.0f * run);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ExactlyOnceTest, ::testing::Values("tcp", "rdma"));

}  // namespace
}  // namespace bx::ps
