// A loopback TCP relay that holds each new connection for a while before it reaches the
// server behind it: a peer whose handshake answers late (its I/O thread waiting for a core on a
// loaded host) as a test can make happen on purpose. Bytes then flow both ways untouched.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bx::rpc::testing {

class SlowConnectRelay {
 public:
  // Listens on 127.0.0.1 (an ephemeral port) and relays to 127.0.0.1:`target_port`, each
  // connection `delay` after it was accepted. Exits the process when it cannot listen.
  SlowConnectRelay(uint16_t target_port, std::chrono::milliseconds delay);
  ~SlowConnectRelay();  // closes every connection
  SlowConnectRelay(const SlowConnectRelay&) = delete;
  SlowConnectRelay& operator=(const SlowConnectRelay&) = delete;

  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  uint64_t accepted() const { return accepted_.load(); }

 private:
  void AcceptLoop();
  void Relay(int client);

  const uint16_t target_port_;
  const std::chrono::milliseconds delay_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> accepted_{0};
  std::mutex mu_;
  std::vector<int> fds_;             // guarded by mu_: every socket open, shut down on stop
  std::vector<std::thread> relays_;  // guarded by mu_
  std::thread acceptor_;
};

}  // namespace bx::rpc::testing
