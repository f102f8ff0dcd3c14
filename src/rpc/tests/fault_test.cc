// Faults injected in the simnic, in one process: the device every rdma socket of the process
// uses vanishes (all QPs to error, link down), so RDMA fails while TCP keeps working.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "rpc/tests/rpc_test_util.h"

namespace bx::rpc::testing {
namespace {

using namespace std::chrono_literals;

class RpcFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartTestServer(/*worker_threads=*/4);
    ClientOptions options = FastClientOptions();
    options.log = [this](std::string_view line) {
      std::lock_guard lock(log_mutex_);
      log_.emplace_back(line);
    };
    auto client = Client::Create({server_->address}, options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
    ASSERT_TRUE(client_->WaitReady(5s).ok());
    ASSERT_EQ(TextOf(client_->Call("where", Text(""), {}).get()), "rdma");
  }
  void TearDown() override {
    server_->service->gate->Open();
    SetDeviceLink(true);  // the next test starts with a working device
    client_.reset();
    server_.reset();
  }
  int LogLines(std::string_view containing) {
    std::lock_guard lock(log_mutex_);
    int n = 0;
    for (const std::string& line : log_) n += line.find(containing) != std::string::npos;
    return n;
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Client> client_;
  std::mutex log_mutex_;
  std::vector<std::string> log_;
};

// The QP fails while the server is running the call; the idempotent call is retried on TCP to the
// same replica and succeeds there.
TEST_F(RpcFaultTest, QpErrorMidCallEndsInARetryOnTcpThatSucceeds) {
  auto call = client_->Call("hold", Text(""), {.timeout = 5s, .idempotent = true});
  ASSERT_TRUE(WaitFor([&] { return server_->service->held.load() == 1; }));
  VanishDevice();
  Result<Message> reply = call.get();
  EXPECT_EQ(TextOf(reply), "tcp") << "the retry ran over tcp";
  ClientStats stats = client_->stats();
  EXPECT_EQ(stats.fallbacks_to_tcp, 1u);
  EXPECT_GE(stats.retries, 1u);
  EXPECT_EQ(stats.replicas[0].state, ReplicaState::kUp);
  EXPECT_TRUE(stats.replicas[0].on_tcp_fallback);
  EXPECT_EQ(server_->service->executions.load(), 2u);  // idempotent: run twice, by design
  // Later calls keep going over TCP while the device is gone; the move was logged once.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(TextOf(client_->Call("where", Text(""), {}).get()), "tcp");
  EXPECT_EQ(LogLines("falling back to tcp"), 1);
}

// The same fault under a call that is not idempotent: the call fails, and runs once only.
TEST_F(RpcFaultTest, NonIdempotentCallIsNeverExecutedTwice) {
  auto call = client_->Call("hold", Text(""), {.timeout = 5s, .idempotent = false});
  ASSERT_TRUE(WaitFor([&] { return server_->service->held.load() == 1; }));
  VanishDevice();
  Result<Message> reply = call.get();
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable) << TextOf(reply);
  server_->service->gate->Open();
  // Give a wrongly retried request every chance to arrive before counting.
  ASSERT_TRUE(WaitFor([&] { return client_->stats().replicas[0].transport == "tcp"; }));
  EXPECT_EQ(TextOf(client_->Call("executions", Text(""), {}).get()), "1");
  EXPECT_EQ(client_->stats().retries, 0u);
}

// After the fault clears, the client finds RDMA again and moves back; each move logged once.
TEST_F(RpcFaultTest, RdmaComesBackAfterTheFaultClearsAndCallsMoveBack) {
  VanishDevice();
  ASSERT_TRUE(WaitFor([&] { return client_->stats().replicas[0].transport == "tcp"; }));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(TextOf(client_->Call("where", Text(""), {}).get()), "tcp");
  // While the link is down, RDMA retries fail quietly; calls keep working over TCP.
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(TextOf(client_->Call("where", Text(""), {}).get()), "tcp");
  SetDeviceLink(true);
  ASSERT_TRUE(WaitFor([&] { return client_->stats().replicas[0].transport == "rdma"; }, 10s));
  EXPECT_EQ(TextOf(client_->Call("where", Text(""), {}).get()), "rdma");
  ClientStats stats = client_->stats();
  EXPECT_EQ(stats.fallbacks_to_tcp, 1u);
  EXPECT_EQ(stats.returns_to_rdma, 1u);
  EXPECT_EQ(LogLines("falling back to tcp"), 1);
  EXPECT_EQ(LogLines("moving back"), 1);
}

// Every call ends, successfully or not, by its deadline plus a small bound, whatever happens
// meanwhile: slow handlers, the device vanishing, the server going away.
TEST_F(RpcFaultTest, EveryCallEndsWithinItsDeadlineAndNeverHangs) {
  constexpr int kCalls = 400;
  // Deadlines are 20-300 ms; the bound is timer and scheduling slack on a loaded 2-core machine
  // (a sanitizer build beside a CPU hog). A call that hangs exceeds it by far.
  constexpr auto kBound = 1s;
  struct Outcome {
    std::chrono::microseconds timeout{0};
    std::chrono::nanoseconds took{0};
    int completions = 0;
  };
  std::vector<Outcome> outcomes(kCalls);
  std::mutex mutex;
  std::condition_variable changed;
  int finished = 0;
  std::mt19937 rng(7);
  for (int i = 0; i < kCalls; ++i) {
    auto timeout = std::chrono::milliseconds(20 + rng() % 280);
    outcomes[i].timeout = timeout;
    const char* methods[] = {"echo", "sleep", "count", "where"};
    std::string method = methods[rng() % 4];
    std::string payload = method == "sleep" ? std::to_string(rng() % 200) : "x";
    auto start = Clock::now();
    client_->Call(method, Text(payload), {.timeout = timeout, .idempotent = (i % 2) == 0},
                  [&, i, start](Result<Message>) {
                    std::lock_guard lock(mutex);
                    outcomes[i].took = Clock::now() - start;
                    ++outcomes[i].completions;
                    ++finished;
                    changed.notify_all();
                  });
    if (i == kCalls / 4) VanishDevice();
    if (i == kCalls / 2) SetDeviceLink(true);
    if (i == 3 * kCalls / 4) server_->server->Stop();
    if (i % 20 == 0) std::this_thread::sleep_for(5ms);
  }
  std::unique_lock lock(mutex);
  ASSERT_TRUE(changed.wait_for(lock, 10s, [&] { return finished == kCalls; }))
      << finished << " of " << kCalls << " calls ended";
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(outcomes[i].completions, 1) << "call " << i;
    EXPECT_LE(outcomes[i].took, outcomes[i].timeout + kBound) << "call " << i;
  }
}

}  // namespace
}  // namespace bx::rpc::testing
