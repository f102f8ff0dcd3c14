// Shared I/O threads (RdmaOptions::share_io_threads): transports of one process that
// ask for them poll with the same threads, a shared thread lives as long as its last transport,
// and two sockets whose both ends sit on one thread still talk.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "alloc/verbs_registrar.h"
#include "bx/transport.h"
#include "transport/rdma/io_thread_set.h"
#include "transport/rdma/rdma_transport.h"

namespace bx::rdma {
namespace {

using namespace std::chrono_literals;

IoThreadOptions Options() {
  IoThreadOptions o;
  o.name = "bx-test-io";
  return o;
}

// Whether `io` still runs its loop: a task posted to a stopped thread runs on the poster.
bool Running(IoThread& io) {
  bool on_thread = false;
  io.RunAndWait([&] { on_thread = io.IsCurrent(); });
  return on_thread;
}

TEST(IoThreadSetTest, SharedSetsHandOutTheSameThreadsOwnedOnesTheirOwn) {
  verbs::Device* device = bemalloc::RegisteredDevice();
  ASSERT_NE(device, nullptr);
  auto a = IoThreadSet::Acquire(*device, Options(), 1, /*shared=*/true);
  auto b = IoThreadSet::Acquire(*device, Options(), 2, /*shared=*/true);
  auto own = IoThreadSet::Acquire(*device, Options(), 1, /*shared=*/false);
  ASSERT_TRUE(a.ok() && b.ok() && own.ok());
  ASSERT_EQ(a->threads().size(), 1u);
  ASSERT_EQ(b->threads().size(), 2u);
  EXPECT_EQ(a->threads()[0], b->threads()[0]);
  EXPECT_NE(a->threads()[0], b->threads()[1]);
  EXPECT_NE(own->threads()[0], a->threads()[0]);

  // Different polling settings make different threads: a transport gets what it asked for.
  IoThreadOptions fixed = Options();
  fixed.adaptive_polling = false;
  auto c = IoThreadSet::Acquire(*device, fixed, 1, /*shared=*/true);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->threads()[0], a->threads()[0]);
}

TEST(IoThreadSetTest, ASharedThreadStopsWithItsLastUser) {
  verbs::Device* device = bemalloc::RegisteredDevice();
  ASSERT_NE(device, nullptr);
  auto a = IoThreadSet::Acquire(*device, Options(), 1, true);
  auto b = IoThreadSet::Acquire(*device, Options(), 1, true);
  ASSERT_TRUE(a.ok() && b.ok());
  std::shared_ptr<IoThread> thread = a->threads()[0];
  ASSERT_TRUE(Running(*thread));
  a->Release();
  EXPECT_TRUE(Running(*thread)) << "b still uses it";
  b->Release();
  EXPECT_FALSE(Running(*thread)) << "its last user is gone";
  // A new user gets a fresh thread, not the stopped one.
  auto again = IoThreadSet::Acquire(*device, Options(), 1, true);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->threads()[0], thread);
  EXPECT_TRUE(Running(*again->threads()[0]));
}

TEST(IoThreadSetTest, TwoTransportsOnOneSharedThreadExchangeMessages) {
  TransportOptions options;
  options.rdma.share_io_threads = true;
  auto server = CreateRdmaTransport(options);
  auto client = CreateRdmaTransport(options);
  ASSERT_TRUE(server.ok() && client.ok());
  std::shared_ptr<Socket> accepted;
  auto listener = (*server)->Listen("rdma://127.0.0.1:0", [&](std::shared_ptr<Socket> s) {
    accepted = s;
    SocketHandlers h;
    h.on_message = [](Socket& socket, Buffer message) { socket.Send(std::move(message)); };
    return h;
  });
  ASSERT_TRUE(listener.ok());
  auto socket = (*client)->Connect((*listener)->url(), {}, 5s);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  for (size_t size : {size_t{64}, size_t{64} << 10, size_t{1} << 20}) {  // eager and rendezvous
    auto message = Buffer::Allocate(size);
    ASSERT_TRUE(message.ok());
    std::memset(message->data(), int(size & 0xff), size);
    (*socket)->Send(std::move(message).value());
    auto echoed = (*socket)->Receive(10s);
    ASSERT_TRUE(echoed.ok()) << echoed.status().ToString();
    EXPECT_EQ(echoed->size(), size);
  }
  auto server_info = GetRdmaTransportInfo(**server);
  auto client_info = GetRdmaTransportInfo(**client);
  ASSERT_TRUE(server_info.ok() && client_info.ok());
  EXPECT_EQ(server_info->io_threads, 1);
  EXPECT_EQ(client_info->io_threads, 1);
  (*socket)->Close();
  (*listener)->Close();
}

}  // namespace
}  // namespace bx::rdma
