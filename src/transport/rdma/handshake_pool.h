// HandshakePool: runs each accepted bootstrap connection's handshake on a thread of its own, so
// that a client which connects and then stays silent (or trickles bytes) holds only its own
// handshake, never the accept loop or other clients' handshakes. Bounded per remote host and in
// total: a connection beyond either bound is closed at once, before a thread or a byte is spent
// on it.
//
// Threads: Start from the accept thread; Close from any thread but a handshake's own.
#pragma once

#include <cstddef>
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
  explicit HandshakePool(Limits limits) : limits_(limits) {}
  ~HandshakePool() { Close(); }
  HandshakePool(const HandshakePool&) = delete;
  HandshakePool& operator=(const HandshakePool&) = delete;

  // Runs `handshake(fd)` on a new thread and returns true; the handshake owns `fd` (closes it or
  // hands it on). false, with `fd` untouched, when `host` already has per_host handshakes in
  // progress, the pool has total, or it is closed.
  bool Start(int fd, const std::string& host, std::function<void(int fd)> handshake);

  // Handshakes in progress (finished threads are reaped by Start and Close).
  size_t running() const;

  // Refuses new handshakes, wakes the running ones by shutting their sockets down (their reads
  // and writes fail at once, so each ends with an error and closes its socket), and joins them.
  void Close();

 private:
  struct Handshake {
    // A dup of the handshake's socket: Close shuts the socket down through it, whatever the
    // handshake has done with its own descriptor (closed it, handed it to a connection).
    int wake_fd;
    std::string host;
    bool done = false;  // guarded by mu_
    std::thread thread;
    ~Handshake() {
      if (thread.joinable()) thread.join();  // never with mu_ held: the thread's last step takes it
    }
  };
  void ReapLocked(std::map<uint64_t, std::unique_ptr<Handshake>>& finished);

  const Limits limits_;
  mutable std::mutex mu_;
  bool closed_ = false;
  uint64_t next_id_ = 0;
  std::map<uint64_t, std::unique_ptr<Handshake>> handshakes_;  // guarded by mu_
  std::map<std::string, size_t> per_host_;                     // running, guarded by mu_
};

}  // namespace bx::rdma
