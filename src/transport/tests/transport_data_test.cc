// What every transport must deliver: whole messages, intact, in order, over many sockets, and
// through Receive() when a socket has no on_message.
#include <cstring>
#include <random>
#include <thread>

#include "transport/tests/transport_fixture.h"

namespace bx::transport::testing {
namespace {

// Checks echoed messages against the (size, seed) list the client sent, in order.
struct EchoCheck {
  explicit EchoCheck(std::vector<std::pair<size_t, uint64_t>> expected)
      : expected(std::move(expected)) {}
  void OnMessage(Buffer message) {
    bool good =
        next < expected.size() && HasPattern(message, expected[next].first, expected[next].second);
    waiter.Notify([&] {
      if (!good) ++mismatches;
      ++next;
    });
  }
  bool WaitAll() {
    return waiter.WaitFor([&] { return next >= expected.size(); }, std::chrono::seconds(20));
  }
  const std::vector<std::pair<size_t, uint64_t>> expected;
  Waiter waiter;
  size_t next = 0;  // written on the client's I/O thread only; read under waiter.mutex
  size_t mismatches = 0;
};

TEST_P(TransportTest, EchoThroughReceive) {
  auto listener = ListenEcho();
  CloseLog closes;
  auto socket = Connect(*listener, closes.Handlers());  // no on_message: queue mode
  ASSERT_TRUE(socket);
  EXPECT_EQ(socket->scheme(), GetParam());
  for (uint64_t i = 0; i < 10; ++i) socket->Send(PatternMessage(100 + i, i));
  for (uint64_t i = 0; i < 10; ++i) {
    Result<Buffer> message = socket->Receive(std::chrono::seconds(5));
    ASSERT_TRUE(message.ok()) << message.status().ToString();
    EXPECT_TRUE(HasPattern(*message, 100 + i, i)) << "message " << i;
  }
  Result<Buffer> nothing = socket->Receive(std::chrono::milliseconds(20));
  ASSERT_FALSE(nothing.ok());
  EXPECT_EQ(nothing.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(socket->status().ok());
}

TEST_P(TransportTest, ReceiveReturnsQueuedMessagesThenTheCloseReason) {
  auto listener = Listen([](Socket&, Buffer) {});
  CloseLog closes;
  auto socket = Connect(*listener, closes.Handlers());
  ASSERT_TRUE(socket);
  ASSERT_TRUE(log_.waiter.WaitFor([&] { return log_.sockets.size() == 1; }));
  std::shared_ptr<Socket> server_socket = log_.sockets[0];
  SendLog sends(3);
  for (size_t i = 0; i < 3; ++i) server_socket->Send(PatternMessage(64, i), sends.For(i));
  ASSERT_TRUE(sends.WaitAll());
  server_socket->Close();
  ASSERT_TRUE(closes.WaitClosed());
  for (uint64_t i = 0; i < 3; ++i) {  // what arrived before the close is still delivered
    Result<Buffer> message = socket->Receive(std::chrono::seconds(5));
    ASSERT_TRUE(message.ok()) << message.status().ToString();
    EXPECT_TRUE(HasPattern(*message, 64, i));
  }
  Result<Buffer> after = socket->Receive(std::chrono::seconds(5));
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().code(), StatusCode::kDeadlineExceeded) << after.status().ToString();
}

TEST_P(TransportTest, KeepsOrderOfManySmallMessages) {
  constexpr uint64_t kMessages = 20000;
  Waiter done;
  uint64_t received = 0;  // guarded by done.mutex
  uint64_t out_of_order = 0;
  auto listener = Listen([&](Socket&, Buffer message) {
    uint64_t sequence = 0;
    std::memcpy(&sequence, message.data(), sizeof(sequence));
    done.Notify([&] {
      if (sequence != received) ++out_of_order;
      ++received;
    });
  });
  CloseLog closes;
  auto socket = Connect(*listener, closes.Handlers());
  ASSERT_TRUE(socket);
  for (uint64_t i = 0; i < kMessages; ++i) {
    Result<Buffer> message = Buffer::Allocate(sizeof(i));
    ASSERT_TRUE(message.ok());
    std::memcpy(message->data(), &i, sizeof(i));
    socket->Send(std::move(message).value());
  }
  ASSERT_TRUE(done.WaitFor([&] { return received == kMessages; }));
  EXPECT_EQ(out_of_order, 0u);
  // A message counts as sent when its send completes, which over rdma comes after the peer has
  // it (the ACK travels back, and a sleeping I/O thread takes it on its wake-up): wait for it.
  auto counters = socket->counters();
  for (int i = 0; i < 10000 && counters["messages_sent"] < kMessages; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    counters = socket->counters();
  }
  EXPECT_EQ(counters["messages_sent"], kMessages);
  EXPECT_EQ(counters["bytes_sent"], kMessages * sizeof(uint64_t));
  server_.reset();  // before `done` goes out of scope
}

TEST_P(TransportTest, EchoesRandomSizesUpTo64MiBIntact) {
  std::mt19937_64 random(6);  // fixed seed: the same sizes every run
  std::vector<std::pair<size_t, uint64_t>> messages;
  for (uint64_t i = 0; i < 120; ++i) {
    // Log-uniform from 1 B to 1 MiB, so every size class is hit.
    double exponent = std::uniform_real_distribution<double>(0, 20)(random);
    messages.push_back({static_cast<size_t>(std::exp2(exponent)), i});
  }
  // A few large ones in between, up to the 64 MiB the suite promises.
  messages.insert(messages.begin() + 10, {size_t{4} << 20, 1000});
  messages.insert(messages.begin() + 50, {(size_t{16} << 20) + 3, 1001});
  messages.insert(messages.begin() + 90, {size_t{64} << 20, 1002});
  auto check = std::make_shared<EchoCheck>(messages);
  auto listener = ListenEcho();
  CloseLog closes;
  auto socket = Connect(*listener, closes.Handlers([check](Socket&, Buffer message) {
    check->OnMessage(std::move(message));
  }));
  ASSERT_TRUE(socket);
  SendLog sends(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    socket->Send(PatternMessage(messages[i].first, messages[i].second), sends.For(i));
  }
  ASSERT_TRUE(check->WaitAll()) << check->next << " of " << messages.size() << " echoed";
  EXPECT_EQ(check->mismatches, 0u);
  ASSERT_TRUE(sends.WaitAll());
  EXPECT_EQ(sends.ok(), messages.size()) << sends.last_error().ToString();
}

TEST_P(TransportTest, ManySocketsEchoIndependently) {
  TransportOptions options;
  options.io_threads = 2;
  CreateTransports(options);
  constexpr int kSockets = 64;
  constexpr int kMessagesPerSocket = 16;
  auto listener = ListenEcho();
  std::mt19937_64 random(64);
  std::vector<std::shared_ptr<EchoCheck>> checks;
  std::vector<std::shared_ptr<Socket>> sockets;
  std::vector<CloseLog> closes(kSockets);
  for (int s = 0; s < kSockets; ++s) {
    std::vector<std::pair<size_t, uint64_t>> messages;
    for (int m = 0; m < kMessagesPerSocket; ++m) {
      messages.push_back({1 + random() % (64 << 10), random()});
    }
    auto check = std::make_shared<EchoCheck>(messages);
    checks.push_back(check);
    auto socket = Connect(*listener, closes[s].Handlers([check](Socket&, Buffer message) {
      check->OnMessage(std::move(message));
    }));
    ASSERT_TRUE(socket);
    sockets.push_back(socket);
  }
  for (int s = 0; s < kSockets; ++s) {
    for (auto [size, seed] : checks[s]->expected) sockets[s]->Send(PatternMessage(size, seed));
  }
  for (int s = 0; s < kSockets; ++s) {
    ASSERT_TRUE(checks[s]->WaitAll()) << "socket " << s;
    EXPECT_EQ(checks[s]->mismatches, 0u) << "socket " << s;
  }
  EXPECT_EQ(log_.messages.load(), uint64_t{kSockets} * kMessagesPerSocket);
  for (auto& socket : sockets) socket->Close();
  for (auto& close : closes) {
    ASSERT_TRUE(close.WaitClosed());
    EXPECT_TRUE(close.last().ok()) << close.last().ToString();
  }
  EXPECT_TRUE(log_.waiter.WaitFor([&] { return log_.closes.size() == kSockets; }));
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest, ::testing::ValuesIn(SchemesUnderTest()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace bx::transport::testing
