// TransportTest: a server and a client transport of the scheme under test (each with its own I/O
// threads, as two processes would have) and helpers to listen, connect and count callbacks.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bx/transport.h"
#include "transport/tests/transports_under_test.h"

namespace bx::transport::testing {

// What the server side saw, shared by every accepted socket.
struct ServerLog {
  Waiter waiter;
  std::vector<std::shared_ptr<Socket>> sockets;  // guarded by waiter.mutex
  std::vector<Status> closes;                    // guarded by waiter.mutex
  std::atomic<uint64_t> messages{0};
};

// Counts a socket's on_close calls. A handle: copies share one log, which lives as long as the
// handlers that write to it (so a transport torn down after the test body is still safe).
class CloseLog {
 public:
  SocketHandlers Handlers(std::function<void(Socket&, Buffer)> on_message = {}) {
    return {std::move(on_message), [state = state_](Socket&, const Status& status) {
              state->waiter.Notify([&] {
                ++state->count;
                state->last = status;
              });
            }};
  }
  bool WaitClosed() {
    return state_->waiter.WaitFor([&] { return state_->count > 0; });
  }
  int count() {
    std::lock_guard<std::mutex> lock(state_->waiter.mutex);
    return state_->count;
  }
  Status last() {
    std::lock_guard<std::mutex> lock(state_->waiter.mutex);
    return state_->last;
  }

 private:
  struct State {
    Waiter waiter;
    int count = 0;
    Status last;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr std::chrono::milliseconds kConnectTimeout{5000};

  void SetUp() override { CreateTransports({}); }
  void TearDown() override {
    gate_.Open();  // never leave an I/O thread blocked behind a failed assertion
    client_.reset();
    server_.reset();
  }

  void CreateTransports(const TransportOptions& options) {
    client_.reset();
    server_.reset();
    const TransportUnderTest& transport = FindTransport(GetParam());
    auto server = transport.create(options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    auto client = transport.create(options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    server_ = std::move(server).value();
    client_ = std::move(client).value();
  }

  std::string AnyPortUrl() const { return GetParam() + "://127.0.0.1:0"; }

  // Listens with `on_message` for every accepted socket; records sockets and closes in log_.
  std::unique_ptr<Listener> Listen(std::function<void(Socket&, Buffer)> on_message) {
    auto listener =
        server_->Listen(AnyPortUrl(), [this, on_message](const std::shared_ptr<Socket>& socket) {
          log_.waiter.Notify([&] { log_.sockets.push_back(socket); });
          return SocketHandlers{on_message, [this](Socket&, const Status& status) {
                                  log_.waiter.Notify([&] { log_.closes.push_back(status); });
                                }};
        });
    EXPECT_TRUE(listener.ok()) << listener.status().ToString();
    return listener.ok() ? std::move(listener).value() : nullptr;
  }
  // Echoes every message back to its sender.
  std::unique_ptr<Listener> ListenEcho() {
    return Listen([this](Socket& socket, Buffer message) {
      log_.messages.fetch_add(1);
      socket.Send(std::move(message));
    });
  }
  // The first message blocks the server's I/O thread on gate_ (a peer that stops reading).
  std::unique_ptr<Listener> ListenStalled() {
    return Listen([this](Socket&, Buffer) {
      if (log_.messages.fetch_add(1) == 0) {
        stalled_.Notify([&] { server_stalled_ = true; });
        gate_.Wait();
      }
    });
  }
  bool WaitServerStalled() {
    return stalled_.WaitFor([&] { return server_stalled_; });
  }
  // Transports whose sockets hold `max_queued_bytes` of unsent messages, and a socket to a
  // listener that stalls on its first message (ListenStalled; it lives as long as the test).
  std::shared_ptr<Socket> ConnectToStalledPeer(size_t max_queued_bytes, CloseLog& closes) {
    TransportOptions options;
    options.max_queued_bytes = max_queued_bytes;
    CreateTransports(options);
    stalled_listener_ = ListenStalled();
    return Connect(*stalled_listener_, closes.Handlers());
  }

  std::shared_ptr<Socket> Connect(const Listener& listener, SocketHandlers handlers) {
    auto socket = client_->Connect(listener.url(), std::move(handlers), kConnectTimeout);
    EXPECT_TRUE(socket.ok()) << socket.status().ToString();
    return socket.ok() ? std::move(socket).value() : nullptr;
  }

  std::unique_ptr<Transport> server_;
  std::unique_ptr<Listener> stalled_listener_;  // destroyed before server_
  std::unique_ptr<Transport> client_;
  ServerLog log_;
  Gate gate_;
  Waiter stalled_;
  bool server_stalled_ = false;  // guarded by stalled_.mutex
};

// Counts send callbacks by outcome and checks that each message's callback runs exactly once.
// A handle like CloseLog.
class SendLog {
 public:
  explicit SendLog(size_t messages) { state_->calls.resize(messages); }
  SendCallback For(size_t index) {
    return [state = state_, index](const Status& status) {
      state->waiter.Notify([&] {
        if (++state->calls[index] > 1) ++state->repeated;
        if (status.ok()) {
          ++state->ok;
        } else {
          ++state->failed;
          if (status.code() == StatusCode::kResourceExhausted) ++state->refused;
          state->last_error = status;
        }
      });
    };
  }
  bool WaitAll() { return WaitFirst(state_->calls.size()); }
  // Waits for the callbacks of the first `sent` messages.
  bool WaitFirst(size_t sent, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    return state_->waiter.WaitFor([&] { return state_->ok + state_->failed >= sent; }, timeout);
  }
  size_t ok() { return Read(&State::ok); }
  size_t failed() { return Read(&State::failed); }
  size_t refused() { return Read(&State::refused); }
  size_t repeated() { return Read(&State::repeated); }
  Status last_error() {
    std::lock_guard<std::mutex> lock(state_->waiter.mutex);
    return state_->last_error;
  }

 private:
  struct State {
    Waiter waiter;
    std::vector<int> calls;
    size_t ok = 0;
    size_t failed = 0;
    size_t refused = 0;
    size_t repeated = 0;
    Status last_error;
  };
  size_t Read(size_t State::*field) {
    std::lock_guard<std::mutex> lock(state_->waiter.mutex);
    return (*state_).*field;
  }
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace bx::transport::testing
