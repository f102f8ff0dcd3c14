// Replica sets: the selection policies spread calls, a replica that cannot be reached is marked
// down and skipped, and during a full outage the retry budget caps retries.
#include <gtest/gtest.h>

#include <thread>

#include "rpc/tests/rpc_test_util.h"

namespace bx::rpc::testing {
namespace {

using namespace std::chrono_literals;

// A replica address where nothing listens: a server started and stopped again.
ReplicaAddress DeadAddress() {
  auto server = StartTestServer(0, "rdma,tcp");
  ReplicaAddress address = server->address;
  server->server->Stop();
  return address;
}

// A test server brought back on `address`'s tcp port, where a client already looks for it.
struct Restarted {
  TestService service;  // outlives the server, which calls into it
  std::unique_ptr<Server> server;
  Status set_up;   // creating the server and registering the service
  Status started;  // Start on the old port (another program may have taken it meanwhile)
};

std::unique_ptr<Restarted> RestartAt(const ReplicaAddress& address) {
  auto restarted = std::make_unique<Restarted>();
  ServerOptions options;
  options.log = [](std::string_view) {};
  Result<std::unique_ptr<Server>> server = Server::Create(options);
  if (!server.ok()) {
    restarted->set_up = server.status();
    return restarted;
  }
  restarted->server = std::move(server).value();
  restarted->set_up = restarted->service.Register(*restarted->server);
  if (restarted->set_up.ok()) restarted->started = restarted->server->Start({address.tcp_url});
  return restarted;
}

class RpcPolicyTest : public ::testing::TestWithParam<ReplicaPolicy> {};

TEST_P(RpcPolicyTest, SpreadsCallsOverReadyReplicas) {
  std::vector<std::unique_ptr<TestServer>> servers;
  std::vector<ReplicaAddress> addresses;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(StartTestServer(0, "tcp"));
    addresses.push_back(servers.back()->address);
  }
  ClientOptions options = FastClientOptions();
  options.policy = GetParam();
  // This test is about spreading: a slow (sanitizer) build must not mark a replica down on a
  // late heartbeat, nor time a call out.
  options.heartbeat_timeout = std::chrono::seconds(2);
  auto client = Client::Create(addresses, options);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(WaitFor([&] {
    for (const ReplicaInfo& r : (*client)->stats().replicas) {
      if (r.state != ReplicaState::kUp) return false;
    }
    return true;
  }));
  constexpr int kCalls = 300;
  std::vector<std::future<Result<Message>>> futures;
  CallOptions call;
  call.timeout = std::chrono::seconds(10);
  for (int i = 0; i < kCalls; ++i) futures.push_back((*client)->Call("count", Text(""), call));
  for (auto& f : futures) {
    Result<Message> reply = f.get();
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  }
  for (const auto& server : servers) {
    // Every policy uses every replica; round-robin exactly evenly.
    EXPECT_GT(server->service->executions.load(), kCalls / 10u);
    if (GetParam() == ReplicaPolicy::kRoundRobin) {
      EXPECT_EQ(server->service->executions.load(), kCalls / 3u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, RpcPolicyTest,
                         ::testing::Values(ReplicaPolicy::kRoundRobin,
                                           ReplicaPolicy::kLeastOutstanding,
                                           ReplicaPolicy::kPowerOfTwoChoices));

TEST(RpcReplicaTest, UnreachableReplicaIsMarkedDownAndSkipped) {
  auto live = StartTestServer(0, "rdma,tcp");
  auto client = Client::Create({DeadAddress(), live->address}, FastClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(WaitFor([&] {
    auto stats = (*client)->stats();
    return stats.replicas[0].state == ReplicaState::kDown &&
           stats.replicas[1].state == ReplicaState::kUp;
  }));
  for (int i = 0; i < 20; ++i) {
    // Not idempotent: each runs once, on the live replica.
    EXPECT_TRUE((*client)->Call("count", Text(""), {}).get().ok());
  }
  EXPECT_EQ(live->service->executions.load(), 20u);
  EXPECT_EQ((*client)->stats().replicas[1].transport, "rdma");
}

TEST(RpcReplicaTest, DownReplicaIsProbedBackUp) {
  // Bring up a server on fixed ports after the client has marked them down.
  auto first = StartTestServer(0, "tcp");
  ReplicaAddress address = first->address;
  first->server->Stop();
  auto client = Client::Create({address}, FastClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(WaitFor([&] { return (*client)->stats().replicas[0].state == ReplicaState::kDown; }));
  std::unique_ptr<Restarted> again = RestartAt(address);
  ASSERT_TRUE(again->set_up.ok()) << again->set_up.ToString();
  if (!again->started.ok()) GTEST_SKIP() << "port taken meanwhile: " << again->started.ToString();
  ASSERT_TRUE(WaitFor([&] { return (*client)->stats().replicas[0].state == ReplicaState::kUp; }));
  EXPECT_TRUE((*client)->Call("echo", Text("back"), {}).get().ok());
  EXPECT_GE((*client)->stats().replica_state_changes, 2u);  // down, then up
}

// A call made while its only replica is down retries when the replica is probed again, not
// sooner: a replica back within the call's deadline serves it. Retried on its backoff alone (2
// and 4 ms) the call used its three attempts on the same down replica in 6 ms, and a client
// evicted once by a connection flood failed with "no replica is reachable"
// (python_hostile_network, CI).
TEST(RpcReplicaTest, ACallToADownReplicaRetriesAtItsProbesAndIsServedWhenItComesBack) {
  auto first = StartTestServer(0, "tcp");
  ReplicaAddress address = first->address;
  first->server->Stop();
  ClientOptions options = FastClientOptions();
  options.probe_interval = 500ms;
  auto client = Client::Create({address}, options);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(WaitFor([&] { return (*client)->stats().replicas[0].state == ReplicaState::kDown; }));
  std::future<Result<Message>> reply =
      (*client)->Call("echo", Text("late"), {.timeout = 10s, .idempotent = true});
  // The call's first attempt found no replica; the server comes back before its next probe.
  ASSERT_TRUE(WaitFor([&] { return (*client)->stats().retries >= 1; }));
  std::unique_ptr<Restarted> again = RestartAt(address);
  ASSERT_TRUE(again->set_up.ok()) << again->set_up.ToString();
  if (!again->started.ok()) GTEST_SKIP() << "port taken meanwhile: " << again->started.ToString();
  Result<Message> got = reply.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(TextOf(got), "late");
}

TEST(RpcReplicaTest, RetryBudgetCapsRetriesDuringAFullOutage) {
  ClientOptions options = FastClientOptions();
  options.retry.max_attempts = 5;
  options.retry.initial_backoff = 1ms;
  options.retry.budget_ratio = 0.1;
  options.retry.budget_max_tokens = 10;
  auto client = Client::Create({DeadAddress(), DeadAddress()}, options);
  ASSERT_TRUE(client.ok());
  // Calls made while the first connection attempts are still under way would only wait for them
  // (and, on a slow machine, could time out waiting, never reaching a retry).
  ASSERT_TRUE(WaitFor([&] {
    for (const ReplicaInfo& r : (*client)->stats().replicas) {
      if (r.state != ReplicaState::kDown) return false;
    }
    return true;
  }));
  constexpr int kCalls = 200;
  std::vector<std::future<Result<Message>>> futures;
  for (int i = 0; i < kCalls; ++i) {
    futures.push_back((*client)->Call("echo", Text("x"), {.timeout = 1s, .idempotent = true}));
  }
  for (auto& f : futures) EXPECT_FALSE(f.get().ok());
  ClientStats stats = (*client)->stats();
  // Without a budget every call would retry 4 times (800 retries).
  EXPECT_LE(stats.retries, 10u + kCalls / 10u + 1u);
  EXPECT_GT(stats.retries_throttled, 0u);
  EXPECT_EQ(stats.ok, 0u);
}

}  // namespace
}  // namespace bx::rpc::testing
