// TransportOptions::max_connections_per_peer: connections an accepting side holds per remote IP
// address. A slot is taken after the peer authenticated and before anything is allocated for it,
// and given back when the connection ends (PeerSlot is RAII).
//
// Threads: thread-safe; a PeerSlot may be released on any thread, also after the limiter's
// owner is gone.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace bx::transport {

class PeerLimiter;

class PeerSlot {
 public:
  PeerSlot() = default;
  PeerSlot(PeerSlot&& other) noexcept = default;
  PeerSlot& operator=(PeerSlot&& other) noexcept;
  ~PeerSlot() { Release(); }
  void Release();

 private:
  friend class PeerLimiter;
  struct State;
  PeerSlot(std::shared_ptr<State> state, std::string address)
      : state_(std::move(state)), address_(std::move(address)) {}
  std::shared_ptr<State> state_;
  std::string address_;
};

class PeerLimiter {
 public:
  // `max_per_peer` 0: unlimited (slots are still counted).
  explicit PeerLimiter(int max_per_peer);
  // A slot for one more connection from `address`, or nothing when it holds the maximum.
  std::optional<PeerSlot> TryAcquire(const std::string& address);
  // Connections currently counted for `address`.
  size_t Count(const std::string& address) const;

 private:
  std::shared_ptr<PeerSlot::State> state_;
};

struct PeerSlot::State {
  mutable std::mutex mu;
  std::unordered_map<std::string, size_t> counts;
  size_t max = 0;  // 0: unlimited
};

}  // namespace bx::transport
