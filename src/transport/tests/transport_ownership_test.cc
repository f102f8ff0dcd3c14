// Who may outlive whom, for every transport: a socket the application still holds after its
// transport is gone, and a transport destroyed from one of its own sockets' callbacks. Each must
// end cleanly (callbacks once, no wait for a thread that is gone); a use-after-free shows under
// ASan, a deadlock as a timeout.
#include <future>
#include <optional>
#include <thread>

#include "transport/tests/transport_fixture.h"

namespace bx::transport::testing {
namespace {

constexpr auto kWait = std::chrono::seconds(10);

TEST_P(TransportTest, ASocketIsUsableAfterItsTransportIsGone) {
  auto listener = ListenEcho();
  CloseLog closes;
  auto socket = Connect(*listener, closes.Handlers());
  ASSERT_TRUE(socket);
  socket->Send(PatternMessage(100, 1));
  ASSERT_TRUE(socket->Receive(kWait).ok());
  ASSERT_TRUE(log_.waiter.WaitFor([&] { return log_.sockets.size() == 1; }));
  std::shared_ptr<Socket> accepted = log_.sockets[0];

  client_.reset();
  EXPECT_EQ(closes.count(), 1) << "the transport's end closed its socket";
  EXPECT_FALSE(socket->status().ok());
  SendLog late(1);
  socket->Send(PatternMessage(100, 2), late.For(0));
  ASSERT_TRUE(late.WaitAll());
  EXPECT_EQ(late.failed(), 1u);
  EXPECT_FALSE(socket->Receive(std::chrono::milliseconds(100)).ok());
  (void)socket->counters();
  socket->Close();
  socket.reset();

  // The accepting side too, once the server transport has gone.
  ASSERT_TRUE(log_.waiter.WaitFor([&] { return log_.closes.size() == 1; }));
  listener->Close();
  listener.reset();
  server_.reset();
  EXPECT_FALSE(accepted->status().ok());
  SendLog late_accepted(1);
  accepted->Send(PatternMessage(100, 3), late_accepted.For(0));
  ASSERT_TRUE(late_accepted.WaitAll());
  EXPECT_EQ(late_accepted.failed(), 1u);
  (void)accepted->counters();
  accepted->Close();
  {
    std::lock_guard lock(log_.waiter.mutex);
    log_.sockets.clear();
  }
  EXPECT_EQ(accepted.use_count(), 1);
  accepted.reset();
  EXPECT_EQ(late.repeated() + late_accepted.repeated(), 0u);
}

// The handlers of the socket the test connects: `on_message` or `on_close` destroys the client
// transport, from the transport's own I/O thread.
class TransportDestroyer {
 public:
  explicit TransportDestroyer(std::unique_ptr<Transport> transport)
      : transport_(std::move(transport)) {}
  Transport& transport() { return *transport_; }
  void Destroy(Socket& socket) {
    // The socket's own calls still work from inside its callback, and after the transport.
    (void)socket.counters();
    std::unique_ptr<Transport> transport;
    {
      std::lock_guard lock(mu_);
      transport = std::move(transport_);
    }
    if (!transport) return;
    transport.reset();
    (void)socket.counters();
    socket.Close();
    done_.set_value(std::this_thread::get_id());
  }
  // The thread the transport was destroyed on, or nothing within the wait.
  std::optional<std::thread::id> WaitDestroyed() {
    auto future = done_.get_future();
    if (future.wait_for(kWait) != std::future_status::ready) return std::nullopt;
    return future.get();
  }

 private:
  std::mutex mu_;
  std::unique_ptr<Transport> transport_;
  std::promise<std::thread::id> done_;
};

TEST_P(TransportTest, ATransportMayBeDestroyedFromItsSocketsMessageCallback) {
  auto listener = ListenEcho();
  auto destroyer = std::make_shared<TransportDestroyer>(std::move(client_));
  CloseLog closes;
  auto socket = destroyer->transport().Connect(
      listener->url(), closes.Handlers([destroyer](Socket& s, Buffer) { destroyer->Destroy(s); }),
      kConnectTimeout);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  (*socket)->Send(PatternMessage(100, 1));
  std::optional<std::thread::id> where = destroyer->WaitDestroyed();
  ASSERT_TRUE(where.has_value()) << "the transport was not destroyed from its callback";
  EXPECT_NE(*where, std::this_thread::get_id());
  ASSERT_TRUE(closes.WaitClosed());
  EXPECT_FALSE((*socket)->status().ok());
  EXPECT_EQ(closes.count(), 1);
  ASSERT_TRUE(log_.waiter.WaitFor([&] { return log_.closes.size() == 1; }))
      << "the peer learns the client went away";
}

TEST_P(TransportTest, ATransportMayBeDestroyedFromItsSocketsCloseCallback) {
  auto listener = ListenEcho();
  auto destroyer = std::make_shared<TransportDestroyer>(std::move(client_));
  auto socket = destroyer->transport().Connect(
      listener->url(),
      SocketHandlers{{}, [destroyer](Socket& s, const Status&) { destroyer->Destroy(s); }},
      kConnectTimeout);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  (*socket)->Send(PatternMessage(100, 1));
  ASSERT_TRUE((*socket)->Receive(kWait).ok());
  ASSERT_TRUE(log_.waiter.WaitFor([&] { return log_.sockets.size() == 1; }));
  log_.sockets[0]->Close();  // the peer closes: on_close runs on the client's I/O thread
  ASSERT_TRUE(destroyer->WaitDestroyed().has_value())
      << "the transport was not destroyed from its callback";
  EXPECT_FALSE((*socket)->status().ok());
}

// Connect from inside a callback either works (tcp: the handshake runs on the caller) or says at
// once why it cannot (rdma: the peer's answer comes through an I/O thread), never waits out its
// timeout.
TEST_P(TransportTest, ConnectFromACallbackWorksOrRefusesAtOnce) {
  auto listener = ListenEcho();
  std::promise<Result<std::shared_ptr<Socket>>> inner;
  const std::string url = listener->url();
  auto socket = client_->Connect(
      url,
      {[&, url](Socket&, Buffer) {
         const auto start = std::chrono::steady_clock::now();
         auto second = client_->Connect(url, {}, std::chrono::seconds(30));
         if (!second.ok() && std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) {
           second = Status(StatusCode::kDeadlineExceeded, "waited for the timeout");
         }
         inner.set_value(std::move(second));
       },
       {}},
      kConnectTimeout);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  (*socket)->Send(PatternMessage(100, 1));
  auto future = inner.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  Result<std::shared_ptr<Socket>> second = future.get();
  if (second.ok()) {
    (*second)->Send(PatternMessage(100, 2));
    EXPECT_TRUE((*second)->Receive(kWait).ok());
  } else {
    EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition)
        << second.status().ToString();
  }
}

}  // namespace
}  // namespace bx::transport::testing
