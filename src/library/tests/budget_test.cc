// The registered-memory budget (InitOptions::memory.max_registered_bytes) as a program meets it:
// held buffers fill it, the next allocation fails at once naming it, a connection that needs
// memory the budget cannot give ends saying so instead of stalling, and releasing the buffers
// lets traffic resume. A process of its own (gtest_discover_tests runs each test alone).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "bx/buffer.h"
#include "bx/init.h"
#include "bx/transport.h"

namespace bx {
namespace {

using namespace std::chrono_literals;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kBudget = 64 * kMiB;
// Above bemalloc's largest span class (2 MiB): its memory comes straight from the pool and goes
// back to it, never from a thread's cache of empty spans, so the budget alone decides.
constexpr size_t kMessage = 3 * kMiB;
// "At once": a refusal takes microseconds; the bound leaves room for a loaded 2-core machine.
constexpr auto kRefusalBound = 1s;
// How long a connection may take to end once memory is refused (it ends at once; this is the
// test's patience, not a timer in the code).
constexpr auto kCloseBound = 10s;

// The server side: echoes, and remembers how its socket ended.
struct EchoServer {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Status> closed;

  AcceptHandler Handler() {
    return [this](const std::shared_ptr<Socket>&) {
      SocketHandlers handlers;
      handlers.on_message = [](Socket& s, Buffer message) { s.Send(std::move(message)); };
      handlers.on_close = [this](Socket&, const Status& why) {
        std::lock_guard lock(mu);
        closed.push_back(why);
        cv.notify_all();
      };
      return handlers;
    };
  }
  // The reason the first accepted socket ended, waiting up to `bound`.
  std::optional<Status> WaitClosed(std::chrono::milliseconds bound) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, bound, [&] { return !closed.empty(); })) return std::nullopt;
    return closed.front();
  }
};

Status Echo(Socket& socket, size_t size) {
  BX_ASSIGN_OR_RETURN(Buffer message, Buffer::Allocate(size));
  std::memset(message.data(), 0x3c, size);
  socket.Send(std::move(message));
  BX_ASSIGN_OR_RETURN(Buffer reply, socket.Receive(10s));
  if (reply.size() != size || reply.data()[size - 1] != std::byte{0x3c})
    return DataLoss("echo came back altered");
  return Status::Ok();
}

TEST(BudgetTest, HeldBuffersExhaustTheBudgetAndReleasingThemLetsTrafficResume) {
  InitOptions options;
  options.memory.max_registered_bytes = kBudget;
  ASSERT_TRUE(Init(options).ok());
  EchoServer server;  // outlives the transport, whose sockets' on_close it records
  auto transport = CreateTransport("rdma");
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  auto listener = (*transport)->Listen("rdma://127.0.0.1:0", server.Handler());
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto socket = (*transport)->Connect((*listener)->url(), {}, 10s);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  ASSERT_TRUE(Echo(**socket, kMessage).ok());

  // Allocated while there is room: the message that will need room at the receiver.
  Result<Buffer> pending = Buffer::Allocate(kMessage);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();

  // Hold buffers until the budget refuses one.
  std::vector<Buffer> held;
  Status refusal;
  auto refused_in = std::chrono::steady_clock::duration::zero();
  while (refusal.ok()) {
    ASSERT_LT(held.size() * kMiB, 2 * kBudget) << "the budget never refused";
    const auto start = std::chrono::steady_clock::now();
    Result<Buffer> buffer = Buffer::Allocate(kMiB);
    refused_in = std::chrono::steady_clock::now() - start;
    if (buffer.ok())
      held.push_back(std::move(buffer).value());
    else
      refusal = buffer.status();
  }
  EXPECT_EQ(refusal.code(), StatusCode::kResourceExhausted) << refusal.ToString();
  EXPECT_NE(refusal.message().find("max_registered_bytes"), std::string::npos)
      << refusal.ToString();
  EXPECT_LT(refused_in, kRefusalBound);
  EXPECT_LE(bemalloc::GetCounters().registered_bytes, kBudget);
  EXPECT_GE(bemalloc::GetCounters().budget_refusals, 1u);

  // The receiver cannot place the message: the connection ends, naming the budget, on both
  // sides, rather than waiting for memory that may never come back.
  (*socket)->Send(std::move(pending).value());
  std::optional<Status> server_closed = server.WaitClosed(kCloseBound);
  ASSERT_TRUE(server_closed.has_value()) << "the receiving side stalled";
  EXPECT_NE(server_closed->message().find("max_registered_bytes"), std::string::npos)
      << server_closed->ToString();
  Result<Buffer> client_end = (*socket)->Receive(kCloseBound);
  ASSERT_FALSE(client_end.ok());
  EXPECT_NE(client_end.status().code(), StatusCode::kDeadlineExceeded)
      << "the sending side stalled";

  // Released, the memory serves again: a new connection carries the same message.
  held.clear();
  auto again = (*transport)->Connect((*listener)->url(), {}, 10s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  Status resumed = Echo(**again, kMessage);
  EXPECT_TRUE(resumed.ok()) << resumed.ToString();
  EXPECT_LE(bemalloc::GetCounters().registered_bytes, kBudget);
}

}  // namespace
}  // namespace bx
