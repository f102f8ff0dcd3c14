// HandshakePool: runs each accepted bootstrap connection's handshake on a thread of its own, so
// that a client which connects and then stays silent (or trickles bytes) holds only its own
// handshake, never the accept loop or other clients' handshakes.
//
// Bounded per remote address and in total. A connection that finds its address's bound (or the
// total) reached does not wait and is not refused: the oldest handshake in its way (that
// address's, or the oldest of all) is evicted instead, its socket shut down. A legitimate
// handshake takes milliseconds, so it is evicted only when a bound's worth of new connections
// arrives while it runs; the silent ones an attacker holds are always the oldest.
//
// Threads: Start from the accept thread; Close from any thread but a handshake's own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace bx::rdma {

class HandshakePool {
 public:
  struct Limits {
    size_t per_host = 16;  // handshakes in progress from one remote address
    size_t total = 256;    // in progress over all addresses
  };
  // Runs with the accepted socket, which it owns (closes it or hands it on). `evicted` becomes
  // true when the pool shut the socket down to make room (or because it closed), so that a
  // failure can be reported as that rather than as the peer's doing.
  using Handshake = std::function<void(int fd, const std::atomic<bool>& evicted)>;

  explicit HandshakePool(Limits limits) : limits_(limits) {}
  ~HandshakePool() { Close(); }
  HandshakePool(const HandshakePool&) = delete;
  HandshakePool& operator=(const HandshakePool&) = delete;

  // Runs `handshake(fd, ...)` on a new thread, evicting as the class comment says, and returns
  // true. false, with `fd` untouched, once the pool is closed or when no thread or descriptor
  // can be had.
  bool Start(int fd, const std::string& host, Handshake handshake);

  // Refuses new handshakes, shuts down the running ones (their reads and writes fail at once,
  // so each ends with an error and closes its socket), and joins them.
  void Close();

 private:
  struct Running {
    // A dup of the handshake's socket: the pool shuts the socket down through it, whatever the
    // handshake has done with its own descriptor (closed it, handed it to a connection).
    int wake_fd = -1;
    std::string host;
    bool done = false;  // guarded by mu_
    std::atomic<bool> evicted{false};
    std::thread thread;
    ~Running();
  };
  using Map = std::map<uint64_t, std::unique_ptr<Running>>;  // by start order: oldest first

  // Evicts the oldest live handshake (from `host`, when given); none may be live.
  void EvictOldestLocked(const std::string* host);
  void ReapLocked(Map& finished);

  const Limits limits_;
  mutable std::mutex mu_;
  bool closed_ = false;
  uint64_t next_id_ = 0;
  size_t live_ = 0;                         // neither done nor evicted
  Map handshakes_;                          // guarded by mu_
  std::map<std::string, size_t> per_host_;  // live ones per address, guarded by mu_
};

}  // namespace bx::rdma
