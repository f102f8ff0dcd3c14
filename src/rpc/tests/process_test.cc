// Replicas in their own processes (bx_rpc_test_server), killed or frozen for real.
//   SIGKILL: the host dies; its sockets close (the kernel resets TCP; the simnic's inter-process
//            link and the rdma bootstrap connection see the peer gone).
//   SIGSTOP: the link is dropped: nothing answers and nothing closes, as when a cable is pulled;
//            only heartbeats and call timeouts can tell. SIGCONT reconnects the cable.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "rpc/tests/rpc_test_util.h"
#include "transport/rdma/rdma_transport.h"

namespace bx::rpc::testing {
namespace {

using namespace std::chrono_literals;

// A bx_rpc_test_server child. It exits when its stdin closes, so it never outlives the test.
class ReplicaProcess {
 public:
  // `environment` adds NAME=value entries to (or replaces them in) this process's environment.
  explicit ReplicaProcess(const std::vector<std::string>& environment = {}) {
    char self[PATH_MAX] = {};
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string dir = n > 0 ? std::string(self, n) : std::string();
    std::string path = dir.substr(0, dir.rfind('/')) + "/bx_rpc_test_server";
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    // posix_spawn, not fork: a fork of this many-threaded process runs jemalloc's prefork
    // handlers, which take every arena lock (more than TSan's deadlock detector can track).
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, to_child[1]);
    posix_spawn_file_actions_addclose(&actions, from_child[0]);
    char* argv[] = {path.data(), nullptr};
    std::vector<std::string> entries = environment;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('=') + 1);
      bool replaced = false;
      for (const std::string& added : environment) replaced |= added.rfind(name, 0) == 0;
      if (!replaced) entries.push_back(entry);
    }
    std::vector<char*> envp;
    for (std::string& entry : entries) envp.push_back(entry.data());
    envp.push_back(nullptr);
    if (posix_spawn(&pid_, path.c_str(), &actions, nullptr, argv, envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    stdin_ = to_child[1];
    FILE* out = fdopen(from_child[0], "r");
    char line[512] = {};
    if (out != nullptr && std::fgets(line, sizeof(line), out) != nullptr) {
      std::string text(line);
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      auto parsed = ReplicaAddress::Parse(text);
      if (parsed.ok()) address_ = *parsed;
    }
    if (out != nullptr) std::fclose(out);
  }
  ~ReplicaProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGCONT);
      if (stdin_ >= 0) close(stdin_);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool ok() const { return pid_ > 0 && !address_.tcp_url.empty(); }
  const ReplicaAddress& address() const { return address_; }
  void Signal(int signal) { kill(pid_, signal); }
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  ReplicaAddress address_;
};

std::unique_ptr<Client> ClientFor(const std::vector<ReplicaAddress>& replicas,
                                  ReplicaPolicy policy = ReplicaPolicy::kRoundRobin,
                                  ClientOptions options = FastClientOptions()) {
  options.policy = policy;
  auto client = Client::Create(replicas, options);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  if (!client.ok()) return nullptr;
  bool up = WaitFor(
      [&] {
        for (const ReplicaInfo& r : (*client)->stats().replicas) {
          if (r.state != ReplicaState::kUp) return false;
        }
        return true;
      },
      10s);
  EXPECT_TRUE(up);
  return std::move(client).value();
}

TEST(RpcProcessTest, KilledReplicaIsMarkedDownAndCallsMoveToTheOther) {
  ReplicaProcess a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  auto client = ClientFor({a.address(), b.address()});
  ASSERT_TRUE(client);
  EXPECT_EQ(TextOf(client->Call("where", Text(""), {}).get()), "rdma");
  // Calls in flight on both replicas when one dies: the idempotent ones finish on the other.
  std::vector<std::future<Result<Message>>> calls;
  for (int i = 0; i < 10; ++i) {
    calls.push_back(client->Call("sleep", Text("200"), {.timeout = 3s, .idempotent = true}));
  }
  std::this_thread::sleep_for(50ms);
  auto killed_at = Clock::now();
  a.Kill();
  for (auto& call : calls) EXPECT_EQ(TextOf(call.get()), "slept");
  EXPECT_LT(Clock::now() - killed_at, 3s + 1s) << "within one deadline";
  ASSERT_TRUE(WaitFor([&] { return client->stats().replicas[0].state == ReplicaState::kDown; }));
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(client->Call("count", Text(""), {}).get().ok());
  EXPECT_EQ(TextOf(client->Call("executions", Text(""), {}).get()), "10");
  EXPECT_GE(client->stats().replica_state_changes, 1u);
}

TEST(RpcProcessTest, ReplicaWhoseLinkDropsIsMarkedDownWithinOneDeadlineAndProbedBack) {
  ReplicaProcess a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  // Only heartbeats tell that a's link dropped: their timeout must be well within the calls'
  // deadline (FastClientOptions' is generous, for tests that must not see a stalled peer as gone).
  ClientOptions options = FastClientOptions();
  options.heartbeat_interval = 50ms;
  options.heartbeat_timeout = 500ms;
  // A probe of the frozen replica holds the client's (one) connecting thread until it times out,
  // for each transport. Should the live replica be marked down meanwhile (a stall on a loaded
  // machine), its own probe waits behind that: keep it short.
  options.connect_timeout = 1s;
  auto client = ClientFor({a.address(), b.address()}, ReplicaPolicy::kRoundRobin, options);
  ASSERT_TRUE(client);
  constexpr auto kDeadline = 5s;
  std::vector<std::future<Result<Message>>> calls;
  for (int i = 0; i < 10; ++i) {
    calls.push_back(client->Call("sleep", Text("100"), {.timeout = kDeadline, .idempotent = true}));
  }
  auto dropped_at = Clock::now();
  a.Signal(SIGSTOP);
  for (auto& call : calls) EXPECT_EQ(TextOf(call.get()), "slept");
  EXPECT_LT(Clock::now() - dropped_at, kDeadline + 1s) << "within one deadline";
  EXPECT_EQ(client->stats().replicas[0].state, ReplicaState::kDown);
  // New calls go to the live replica while the link is down.
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(client->Call("echo", Text("x"), {.timeout = kDeadline}).get().ok());
  }
  a.Signal(SIGCONT);
  ASSERT_TRUE(WaitFor([&] { return client->stats().replicas[0].state == ReplicaState::kUp; }, 10s));
  EXPECT_GE(client->stats().replica_state_changes, 2u);
}

TEST(RpcProcessTest, NonIdempotentCallOnAKilledReplicaIsNotRunAgainElsewhere) {
  ReplicaProcess a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  auto client_b = ClientFor({b.address()});
  auto both = ClientFor({a.address(), b.address()}, ReplicaPolicy::kRoundRobin);
  ASSERT_TRUE(client_b && both);
  // Round-robin puts one `hold` on each replica; each blocks there (the first hold of a process
  // waits on its gate). Then a dies with its call in flight.
  auto first = both->Call("hold", Text(""), {.timeout = 2s});
  auto second = both->Call("hold", Text(""), {.timeout = 2s});
  ASSERT_TRUE(WaitFor([&] {
    Result<Message> n = client_b->Call("executions", Text(""), {}).get();
    return n.ok() && TextOf(n) == "1";
  }));
  std::this_thread::sleep_for(50ms);  // a's hold has had time to start too
  a.Kill();
  // One of the two calls was on a: it fails, and is not sent to b, which runs only its own.
  Result<Message> r1 = first.get();
  Result<Message> r2 = second.get();
  const Result<Message>& on_a = r1.status().code() == StatusCode::kUnavailable ? r1 : r2;
  EXPECT_EQ(on_a.status().code(), StatusCode::kUnavailable) << TextOf(r1) << " / " << TextOf(r2);
  EXPECT_EQ(TextOf(client_b->Call("executions", Text(""), {}).get()), "1");
  EXPECT_EQ(both->stats().retries, 0u);
}

// A RoCE port and an InfiniBand port cannot reach each other: the connection is refused at the
// handshake with a message that says so, not left to time out on QP retries.
TEST(RpcProcessTest, AnInfinibandPortAndARocePortRefuseEachOtherSayingWhy) {
  auto transport = CreateTransport("rdma");
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  auto info = rdma::GetRdmaTransportInfo(**transport);
  ASSERT_TRUE(info.ok());
  const bool we_are_infiniband = info->link_layer == "InfiniBand";
  ReplicaProcess other({std::string("BX_SIM_PROFILE=") + (we_are_infiniband ? "roce" : "ib")});
  ASSERT_TRUE(other.ok());
  auto socket = (*transport)->Connect(other.address().rdma_url, {}, 5s);
  ASSERT_FALSE(socket.ok()) << "an IB and a RoCE port connected";
  const std::string message = socket.status().ToString();
  EXPECT_NE(message.find("InfiniBand"), std::string::npos) << message;
  EXPECT_NE(message.find("RoCE"), std::string::npos) << message;
  EXPECT_NE(message.find("cannot reach each other"), std::string::npos) << message;
}

}  // namespace
}  // namespace bx::rpc::testing
