// Every call gets an answer, and the server's memory has a bound: a response the
// transport refuses, larger than its message limit or beyond the connection's send queue, used to
// be dropped, and its caller waited until its deadline with nothing said anywhere; requests
// waiting for a worker had no bound (30 pipelined 64 MiB requests held 1.5 GiB). Now the caller
// gets ResourceExhausted saying why.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <vector>

#include "rpc/tests/rpc_test_util.h"

namespace bx::rpc::testing {
namespace {

using namespace std::chrono_literals;

// A server whose "big" method answers with as many bytes as the request's decimal text says.
// With `batch` > 1 it holds calls until `batch` have arrived and then answers them all at once,
// in arrival order (so that a client can be made to stop reading after the first answer, with
// every other request already at the server).
struct BigServer {
  std::unique_ptr<Server> server;
  ReplicaAddress address;
  std::mutex mu;
  std::vector<ServerCall> held;  // guarded by mu

  BigServer(const std::string& scheme, TransportOptions transport, size_t batch) {
    ServerOptions options;
    options.worker_threads = 1;
    options.transport = transport;
    options.log = [](std::string_view) {};
    auto created = Server::Create(options);
    EXPECT_TRUE(created.ok());
    server = std::move(created).value();
    EXPECT_TRUE(server
                    ->AddMethod("big",
                                [this, batch](ServerCall call) {
                                  std::vector<ServerCall> ready;
                                  {
                                    std::lock_guard lock(mu);
                                    held.push_back(std::move(call));
                                    if (held.size() < batch) return;
                                    ready.swap(held);
                                  }
                                  for (ServerCall& c : ready) Answer(c);
                                })
                    .ok());
    EXPECT_TRUE(server->Start({scheme + "://127.0.0.1:0"}).ok());
    address = server->address();
  }
  static void Answer(ServerCall& call) {
    auto reply = Message::Allocate(std::stoul(std::string(call.request().view())));
    if (!reply.ok()) return call.Fail(reply.status());
    std::memset(reply->data(), 7, reply->size());
    call.Respond(std::move(reply).value());
  }
};

ClientOptions PatientClient() {
  ClientOptions options = FastClientOptions();
  // The second test stalls the client's I/O thread on purpose; no heartbeat verdict meanwhile.
  options.heartbeat_timeout = 60s;
  return options;
}

class RpcResponseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RpcResponseTest, AResponseAboveTheMessageLimitIsAnsweredWithAnError) {
  TransportOptions transport;
  transport.max_message_bytes = 1 << 20;
  BigServer big(GetParam(), transport, 1);
  Server* server = big.server.get();
  auto client = Client::Create({big.address}, PatientClient());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitReady(5s).ok());
  auto start = Clock::now();
  Result<Message> reply =
      (*client)->Call("big", Text(std::to_string(2 << 20)), {.timeout = 20s}).get();
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kResourceExhausted) << reply.status().ToString();
  EXPECT_NE(reply.status().message().find("message limit"), std::string::npos)
      << reply.status().ToString();
  EXPECT_LT(Clock::now() - start, 10s) << "answered, not left to its deadline";
  EXPECT_EQ(server->stats().responses_refused, 1u);
  // The connection is still good.
  EXPECT_TRUE((*client)->Call("big", Text("100"), {.timeout = 5s}).get().ok());
}

// The client stops reading (its I/O thread held in the first call's callback) while 40
// responses of 512 KiB go into a 1 MiB send queue: those the queue refuses are answered with
// errors once it drains, and the rest arrive. Every call ends, none at its deadline.
TEST_P(RpcResponseTest, ResponsesBeyondTheSendQueueAreAnsweredOnceItDrains) {
  TransportOptions transport;
  transport.max_queued_bytes = 1 << 20;
  constexpr int kCalls = 40;
  BigServer big(GetParam(), transport, 1 + kCalls);
  Server* server = big.server.get();
  auto client = Client::Create({big.address}, PatientClient());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitReady(5s).ok());
  auto gate = std::make_shared<Gate>();
  struct OpenAtExit {
    std::shared_ptr<Gate> gate;
    ~OpenAtExit() { gate->Open(); }
  } open_at_exit{gate};
  (*client)->Call("big", Text("100"), {.timeout = 60s}, [gate](Result<Message>) {
    gate->Wait();  // the client's I/O thread reads nothing more until the gate opens
  });
  std::vector<std::future<Result<Message>>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back((*client)->Call("big", Text(std::to_string(512 << 10)), {.timeout = 60s}));
  }
  ASSERT_TRUE(WaitFor([&] { return server->stats().responses_refused > 0; }, 30s))
      << "the send queue never filled";
  gate->Open();
  int ok = 0, refused = 0;
  for (auto& call : calls) {
    Result<Message> reply = call.get();
    if (reply.ok()) {
      ++ok;
      EXPECT_EQ(reply->size(), size_t(512 << 10));
    } else {
      ++refused;
      EXPECT_EQ(reply.status().code(), StatusCode::kResourceExhausted) << reply.status().ToString();
      EXPECT_NE(reply.status().message().find("send queue is full"), std::string::npos)
          << reply.status().ToString();
    }
  }
  EXPECT_EQ(ok + refused, kCalls);
  EXPECT_GT(refused, 0);
  EXPECT_GT(ok, 0);
  EXPECT_EQ(server->stats().responses_refused, uint64_t(refused));
}

// One worker held by a first call; requests of 512 KiB queue behind it until the 1 MiB bound,
// and the rest are answered "server busy" at once. Those queued run when the worker frees.
TEST_P(RpcResponseTest, RequestsBeyondTheWorkerQueueBoundAreRefusedAtOnce) {
  ServerOptions options;
  options.worker_threads = 1;
  options.max_queued_request_bytes = 1 << 20;
  options.log = [](std::string_view) {};
  auto created = Server::Create(options);
  ASSERT_TRUE(created.ok());
  std::unique_ptr<Server> server = std::move(created).value();
  auto gate = std::make_shared<Gate>();
  struct OpenAtExit {
    std::shared_ptr<Gate> gate;
    ~OpenAtExit() { gate->Open(); }
  } open_at_exit{gate};
  std::atomic<int> held{0};
  ASSERT_TRUE(server
                  ->AddMethod("work",
                              [gate, &held](ServerCall call) {
                                if (held.fetch_add(1) == 0) gate->Wait();
                                call.Respond(Text("done"));
                              })
                  .ok());
  ASSERT_TRUE(server->Start({GetParam() + "://127.0.0.1:0"}).ok());
  auto client = Client::Create({server->address()}, PatientClient());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitReady(5s).ok());
  auto first = (*client)->Call("work", Text(""), {.timeout = 30s});
  ASSERT_TRUE(WaitFor([&] { return held.load() == 1; }));
  const std::string request(512 << 10, 'r');
  std::vector<std::future<Result<Message>>> calls;
  for (int i = 0; i < 5; ++i)
    calls.push_back((*client)->Call("work", Text(request), {.timeout = 30s}));
  // Calls 2-4 are answered while the worker is still held.
  for (int i = 2; i < 5; ++i) {
    Result<Message> busy = calls[i].get();
    EXPECT_EQ(busy.status().code(), StatusCode::kResourceExhausted) << busy.status().ToString();
    EXPECT_NE(busy.status().message().find("server busy"), std::string::npos);
  }
  EXPECT_EQ(server->stats().refused_busy, 3u);
  gate->Open();
  EXPECT_EQ(TextOf(first.get()), "done");
  EXPECT_EQ(TextOf(calls[0].get()), "done");
  EXPECT_EQ(TextOf(calls[1].get()), "done");
}

INSTANTIATE_TEST_SUITE_P(Transports, RpcResponseTest, ::testing::Values("tcp", "rdma"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bx::rpc::testing
