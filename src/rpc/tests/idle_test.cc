// Idle connections are closed: a peer that connects and then says nothing used to
// keep its connection, and everything the server holds for it, for ever. Clients of ours
// heartbeat idle connections, so they are never idle long enough to be closed.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "bx/transport.h"
#include "rpc/tests/rpc_test_util.h"

namespace bx::rpc::testing {
namespace {

using namespace std::chrono_literals;

// Far above FastClientOptions' 50 ms heartbeat interval, so that a loaded machine cannot make
// a heartbeating client look idle; short enough to keep the test quick.
constexpr auto kIdleTimeout = 1500ms;

class RpcIdleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RpcIdleTest, ASilentPeerIsClosedAndAHeartbeatingClientIsNot) {
  const std::string scheme = GetParam();
  ServerOptions options;
  options.worker_threads = 1;
  options.idle_timeout = kIdleTimeout;
  options.log = [](std::string_view) {};
  auto server = Server::Create(options);
  ASSERT_TRUE(server.ok());
  TestService service;
  ASSERT_TRUE(service.Register(**server).ok());
  ASSERT_TRUE((*server)->Start({scheme + "://127.0.0.1:0"}).ok());
  const ReplicaAddress address = (*server)->address();
  const std::string url = scheme == "rdma" ? address.rdma_url : address.tcp_url;

  auto client = Client::Create({address}, FastClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitReady(5s).ok());

  // The silent peer: a transport connection that never sends a frame. (`closed` outlives the
  // transport, whose destruction may still run the close handler.)
  std::atomic<bool> closed{false};
  auto transport = CreateTransport(scheme);
  ASSERT_TRUE(transport.ok());
  const auto connected_at = Clock::now();
  auto silent = (*transport)
                    ->Connect(url,
                              SocketHandlers{[](Socket&, Buffer) {},
                                             [&](Socket&, const Status&) { closed = true; }},
                              5s);
  ASSERT_TRUE(silent.ok()) << silent.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return closed.load(); }, 30s)) << "the silent peer was never closed";
  EXPECT_GE(Clock::now() - connected_at, kIdleTimeout) << "closed before it was idle that long";
  EXPECT_EQ((*server)->stats().idle_closed, 1u);

  // The client, quiet all along but for its heartbeats, still has its first connection.
  EXPECT_EQ(TextOf((*client)->Call("echo", Text("still here")).get()), "still here");
  EXPECT_EQ((*server)->stats().connections, 2u) << "the client had to reconnect";
  EXPECT_EQ((*server)->stats().idle_closed, 1u);
  (*silent)->Close();
}

// A client's timer thread wakes when something is due (a heartbeat, a deadline of a call still
// under way), not on a fixed tick, and not for the deadlines of calls that already ended. It
// used to wake every 10 ms, and a host running a worker with a client per shard replica (the
// paper-shaped cluster: 49 clients a worker) spent its cores waking timers. A loaded machine
// can only make the thread wake less often, never more.
TEST_P(RpcIdleTest, AnIdleClientsTimerWakesForHeartbeatsNotEveryTick) {
  std::unique_ptr<TestServer> server = StartTestServer(1, GetParam());
  ASSERT_TRUE(server);
  ClientOptions client_options;  // the default 100 ms heartbeat interval
  client_options.log = [](std::string_view) {};
  auto client = Client::Create({server->address}, client_options);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitReady(5s).ok());
  // 300 calls whose 500 ms deadlines all fall inside the idle window below.
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(TextOf((*client)->Call("echo", Text("hi"), {.timeout = 500ms}).get()), "hi");
  }
  const uint64_t before = (*client)->stats().timer_wakeups;
  std::this_thread::sleep_for(1500ms);  // idle: heartbeats only
  const uint64_t wakeups = (*client)->stats().timer_wakeups - before;
  // About 15 heartbeat intervals; the fixed tick took 150, a wake-up per ended call 300 more.
  EXPECT_LE(wakeups, 45u) << "timer wake-ups in 1.5 s of idle";
  EXPECT_EQ(TextOf((*client)->Call("echo", Text("still here")).get()), "still here");
}

TEST(RpcIdleTest, ANegativeTimeoutIsRefused) {
  ServerOptions options;
  options.idle_timeout = -1ms;
  EXPECT_EQ(Server::Create(options).status().code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, RpcIdleTest, ::testing::Values("rdma", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bx::rpc::testing
