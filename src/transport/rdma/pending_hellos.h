// PendingHellos: accepted bootstrap connections whose Hello has not fully arrived, watched by the
// accept loop itself with poll(), so that a silent or slow client costs a descriptor and 64
// bytes, not a thread. A connection moves on to its handshake thread (HandshakePool) only once
// its whole Hello is in.
//
// Bounded per remote address and in total; a new connection beyond a bound evicts the oldest in
// its way (that address's, else the oldest of all) rather than being turned away, so clients
// that send their Hello at once, as every bexpress peer does, are never starved by idle ones.
//
// Threads: one (the accept loop).
#pragma once

#include <poll.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "bx/status.h"
#include "transport/rdma/bootstrap.h"

namespace bx::rdma {

class PendingHellos {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    size_t per_host = 64;
    size_t total = 4096;
    std::chrono::milliseconds timeout{2000};  // from accept to the Hello's last byte
  };
  struct Arrived {  // a whole Hello: the connection is the caller's now (blocking mode)
    int fd;
    std::string peer, host;
    std::array<uint8_t, kRecordBytes> raw;
  };
  struct Dropped {  // closed here, and why
    std::string peer;
    Status why;
  };

  explicit PendingHellos(Limits limits) : limits_(limits) {}
  ~PendingHellos() { CloseAll(); }
  PendingHellos(const PendingHellos&) = delete;
  PendingHellos& operator=(const PendingHellos&) = delete;

  // Takes a non-blocking accepted connection; evictions to make room go to `dropped`.
  void Add(int fd, std::string peer, std::string host, std::vector<Dropped>& dropped);
  // One pollfd per pending connection, appended in their order.
  void AppendPollFds(std::vector<pollfd>& fds) const;
  // After poll() over what AppendPollFds gave (from fds[first] on, and nothing added since):
  // reads what arrived and moves finished Hellos to `arrived`; closes connections that failed,
  // hung up or ran out of time into `dropped`.
  void Service(const std::vector<pollfd>& fds, size_t first, std::vector<Arrived>& arrived,
               std::vector<Dropped>& dropped);
  // Closes the oldest pending connection into `dropped`; false when there is none.
  bool EvictOldest(std::vector<Dropped>& dropped);
  // Milliseconds until the next deadline (-1: none), for poll's timeout.
  int MillisecondsToNextDeadline() const;
  size_t size() const { return pending_.size(); }
  void CloseAll();

 private:
  struct Pending {
    int fd;
    std::string peer, host;
    Clock::time_point deadline;
    std::array<uint8_t, kRecordBytes> raw{};
    size_t got = 0;
  };
  void Evict(size_t index, std::vector<Dropped>& dropped);
  void Forget(size_t index);  // erases pending_[index] and its per-host count, without closing

  const Limits limits_;
  std::deque<Pending> pending_;  // oldest first
  std::map<std::string, size_t> per_host_;
};

}  // namespace bx::rdma
