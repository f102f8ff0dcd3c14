// Calls over each transport: round trips, many outstanding calls, errors, deadlines propagated to
// and enforced by the server, the future API and fan-out.
#include <gtest/gtest.h>

#include <thread>

#include "rpc/tests/rpc_test_util.h"

namespace bx::rpc::testing {
namespace {

using namespace std::chrono_literals;

class RpcCallTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    server_ = StartTestServer(/*worker_threads=*/GetParam() == "tcp" ? 0 : 2, GetParam());
    auto client = Client::Create({server_->address}, FastClientOptions());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
    ASSERT_TRUE(client_->WaitReady(5s).ok());
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(RpcCallTest, EchoRoundTripOverTheRequestedTransport) {
  Result<Message> reply = client_->Call("echo", Text("hello"), {}).get();
  EXPECT_EQ(TextOf(reply), "hello");
  EXPECT_EQ(TextOf(client_->Call("where", Text(""), {}).get()), GetParam());
  ClientStats stats = client_->stats();
  EXPECT_EQ(stats.ok, 2u);
  EXPECT_EQ(stats.latency["echo"].count(), 1u);
  ASSERT_EQ(stats.replicas.size(), 1u);
  EXPECT_EQ(stats.replicas[0].transport, GetParam());
}

TEST_P(RpcCallTest, ManyOutstandingCallsAreMatchedByCallId) {
  constexpr int kCalls = 500;
  std::vector<std::future<Result<Message>>> futures;
  for (int i = 0; i < kCalls; ++i) {
    std::string payload(static_cast<size_t>(1 + (i * 37) % 20000), static_cast<char>('a' + i % 26));
    payload += std::to_string(i);
    futures.push_back(client_->Call("echo", Text(payload), {.timeout = 10s}));
  }
  for (int i = 0; i < kCalls; ++i) {
    std::string expect(static_cast<size_t>(1 + (i * 37) % 20000), static_cast<char>('a' + i % 26));
    expect += std::to_string(i);
    EXPECT_EQ(TextOf(futures[i].get()), expect) << "call " << i;
  }
}

TEST_P(RpcCallTest, ErrorsComeBackWithTheirKind) {
  Result<Message> missing = client_->Call("no.such.method", Text(""), {}).get();
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  Result<Message> failed = client_->Call("fail", Text(""), {}).get();
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(failed.status().message().find("asked to fail"), std::string::npos);
  ClientStats stats = client_->stats();
  EXPECT_EQ(stats.errors[StatusCode::kNotFound], 1u);
  EXPECT_EQ(stats.errors[StatusCode::kInvalidArgument], 1u);
}

TEST_P(RpcCallTest, CallbackApiRunsExactlyOnce) {
  std::mutex mutex;
  std::condition_variable changed;
  int done = 0;
  for (int i = 0; i < 50; ++i) {
    client_->Call("echo", Text("x"), {}, [&](Result<Message> result) {
      EXPECT_TRUE(result.ok());
      std::lock_guard lock(mutex);
      ++done;
      changed.notify_all();
    });
  }
  std::unique_lock lock(mutex);
  ASSERT_TRUE(changed.wait_for(lock, 10s, [&] { return done == 50; }));
  lock.unlock();
  std::this_thread::sleep_for(50ms);
  lock.lock();
  EXPECT_EQ(done, 50);
}

INSTANTIATE_TEST_SUITE_P(Transports, RpcCallTest, ::testing::Values("rdma", "tcp"),
                         [](const auto& info) { return info.param; });

// Opens `gate` as it goes out of scope, however the test ends: a server's destructor joins the
// worker that a held call occupies. Declare it after the server.
struct OpenAtExit {
  std::shared_ptr<Gate> gate;
  ~OpenAtExit() { gate->Open(); }
};

// The server learns each call's deadline and does not run work whose caller has given up.
TEST(RpcDeadlineTest, ServerDropsExpiredWorkAndClientEndsOnTime) {
  auto server = StartTestServer(/*worker_threads=*/1, "tcp");
  OpenAtExit open_at_exit{server->service->gate};
  auto client = Client::Create({server->address}, FastClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitReady(5s).ok());
  // Occupies the only worker until the gate opens, after the queued calls have expired.
  auto slow = (*client)->Call("hold", Text(""), {.timeout = 10s});
  ASSERT_TRUE(WaitFor([&] { return server->service->held.load() == 1; }));
  std::vector<std::future<Result<Message>>> queued;
  auto start = Clock::now();
  for (int i = 0; i < 5; ++i)
    queued.push_back((*client)->Call("count", Text(""), {.timeout = 100ms}));
  for (auto& f : queued) {
    Result<Message> r = f.get();
    EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << TextOf(r);
  }
  auto waited = Clock::now() - start;
  EXPECT_LT(waited, 100ms + 1s) << "calls must end by their deadline plus a small bound";
  // Each queued call reached the server (6 requests: the hold and the 5) with at most 100 ms of
  // budget left: 100 ms after the last arrived, all their server-side deadlines have passed.
  ASSERT_TRUE(WaitFor([&] { return server->server->stats().requests == 6; }));
  std::this_thread::sleep_for(100ms);
  server->service->gate->Open();
  EXPECT_EQ(TextOf(slow.get()), "tcp");
  // The worker reached the queued calls after their deadline: none ran.
  EXPECT_TRUE(WaitFor([&] { return server->server->stats().dropped_expired >= 5; }));
  ServerStats stats = server->server->stats();
  EXPECT_EQ(stats.dropped_expired, 5u);
  EXPECT_EQ(server->service->executions.load(), 1u);  // the hold: no count ran
  EXPECT_EQ(stats.executed, 1u);                      // the hold
}

TEST(RpcFanOutTest, CollectsResultsAndReportsWhichFailed) {
  auto a = StartTestServer(2, "tcp");
  auto b = StartTestServer(0, "rdma");
  OpenAtExit open_at_exit{a->service->gate};
  auto client_a = Client::Create({a->address}, FastClientOptions());
  auto client_b = Client::Create({b->address}, FastClientOptions());
  ASSERT_TRUE(client_a.ok() && client_b.ok());
  ASSERT_TRUE((*client_a)->WaitReady(5s).ok());
  ASSERT_TRUE((*client_b)->WaitReady(5s).ok());
  std::vector<SubCall> calls;
  calls.push_back({client_a->get(), "echo", Text("a"), true});
  calls.push_back({client_b->get(), "echo", Text("b"), true});
  calls.push_back({client_a->get(), "hold", Text(""), false});  // held past the deadline
  calls.push_back({client_b->get(), "fail", Text(""), false});
  auto start = Clock::now();
  // The deadline leaves the other sub-calls ample time for their round trips on a loaded machine.
  FanOutResult result = FanOut(std::move(calls), 2s).get();
  EXPECT_LT(Clock::now() - start, 2s + 1s);
  a->service->gate->Open();
  ASSERT_EQ(result.results.size(), 4u);
  EXPECT_EQ(TextOf(result.results[0]), "a");
  EXPECT_EQ(TextOf(result.results[1]), "b");
  EXPECT_EQ(result.results[2].status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(result.results[3].status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(result.failed, (std::vector<size_t>{2, 3}));
}

}  // namespace
}  // namespace bx::rpc::testing
