// PushDedup: which pushes a replica has applied, so that a retried push is acknowledged without
// being applied twice.
//
// Per client it keeps the highest sequence `contiguous` such that every push 1..contiguous has
// been applied, plus the set of applied sequences above it (pushes that overtook an earlier
// one). A sequence above contiguous + window is refused as kTooFarAhead (the client has more
// than `window` pushes outstanding, or skipped numbers), so the set never holds more than
// `window` entries: memory is O(clients * window) at worst and O(clients) in the steady state.
//
// Clients: at most max_clients are remembered; a new client beyond that evicts the one that
// pushed least recently. Exactly-once therefore holds for a client as long as it is among the
// max_clients most recently active (default 65536, against tens to hundreds of trainers; an
// evicted client is in practice a dead process, because client ids are drawn per process).
//
// Thread-compatible: the owner (ShardReplica) serialises calls.
#pragma once

#include <cstdint>
#include <set>
#include <unordered_map>
#include <vector>

#include "ps/wire.h"

namespace bx::ps {

class PushDedup {
 public:
  struct Options {
    uint64_t window = 4096;
    size_t max_clients = 65536;
  };
  enum class Verdict { kNew, kDuplicate, kTooFarAhead };

  // What the snapshot stores of one client.
  struct ClientState {
    uint64_t client_id = 0;
    uint64_t contiguous = 0;
    std::vector<uint64_t> recent;  // ascending, all in (contiguous+1, contiguous+window]
  };

  PushDedup() : PushDedup(Options{}) {}
  explicit PushDedup(Options options) : options_(options) {}

  Verdict Check(PushId id) const;
  // Records `id` as applied. Precondition: Check(id) == kNew.
  void MarkApplied(PushId id);

  size_t client_count() const { return clients_.size(); }
  const Options& options() const { return options_; }

  std::vector<ClientState> Export() const;  // sorted by client id
  // Replaces the state with `clients` (validated: recent entries inside the window).
  Status Import(const std::vector<ClientState>& clients);

 private:
  struct Client {
    uint64_t contiguous = 0;
    std::set<uint64_t> recent;
    uint64_t last_use = 0;
  };
  void EvictLeastRecent();

  Options options_;
  std::unordered_map<uint64_t, Client> clients_;
  uint64_t tick_ = 0;
};

}  // namespace bx::ps
