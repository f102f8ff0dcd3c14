// PushDedup: which pushes a replica has applied, so that a retried push is acknowledged without
// being applied twice — with bounded memory, against any authenticated client.
//
// Per client it keeps the highest sequence `contiguous` such that every push 1..contiguous has
// been applied, plus the set of applied sequences above it (pushes that overtook an earlier
// one). A sequence above contiguous + window is refused as kTooFarAhead (the client has more
// than `window` pushes outstanding, or skipped numbers), and while the record holds
// `max_recent` such sequences across all clients an out-of-order push is refused as kRecordFull
// (the in-order one is always taken, so honest clients make progress): memory is bounded by
// max_clients and max_recent, whatever the clients send.
//
// Sessions. A client id is a session: its upper 32 bits are a generation (the client's clock in
// seconds when it started the session), the lower 32 are random. The first applied push of an
// id registers it with the key that came with it (PushRequest::client_key); a later push under
// the id with another key is refused (kWrongKey), so no client can act under another's id.
// At most max_clients are remembered: a new client beyond that evicts one, least recently
// active first, taken from the clients that have pushed only once while they are more than a
// quarter of the record (a flood of one-off ids evicts its own kind, not a quiet trainer) and
// otherwise from the others (a record full of finished jobs' trainers makes room). An eviction
// raises min_generation() above the evicted id's generation, and an unknown id below it is refused
// as kExpired: its pushes may have been applied and forgotten, so none is applied again. The client
// must start a new session (a fresh id at or above min_generation()) and treat any push whose
// earlier attempt may have been applied as of unknown outcome. A retry is therefore never applied
// twice.
//
// Deterministic: replicas that apply the same pushes in the same order hold the same record,
// evictions included (Export/Import keep the eviction order), which catch-up and re-forwarding
// after failover rely on.
//
// Thread-compatible: the owner (ShardReplica) serialises calls.
#pragma once

#include <cstdint>
#include <list>
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
    // Out-of-order sequences held across all clients.
    size_t max_recent = size_t{1} << 20;
  };
  enum class Verdict {
    kNew,
    kDuplicate,
    kTooFarAhead,  // beyond the client's window
    kRecordFull,   // out of order while max_recent sequences are held
    kExpired,      // unknown id below min_generation(): the client was evicted
    kWrongKey,     // the id is registered with another key
  };

  // What the snapshot stores of one client.
  struct ClientState {
    uint64_t client_id = 0;
    uint64_t key = 0;
    uint64_t contiguous = 0;
    std::vector<uint64_t> recent;  // ascending, all in (contiguous+1, contiguous+window]
    bool repeat = false;           // has pushed more than once (evicted after one-off clients)
  };
  // The whole record: clients in eviction order (next to be evicted first).
  struct Record {
    uint64_t min_generation = 0;
    std::vector<ClientState> clients;
  };

  static uint32_t Generation(uint64_t client_id) { return static_cast<uint32_t>(client_id >> 32); }

  PushDedup() : PushDedup(Options{}) {}
  explicit PushDedup(Options options) : options_(options) {}
  PushDedup(const PushDedup&) = delete;
  PushDedup& operator=(const PushDedup&) = delete;

  Verdict Check(PushId id, uint64_t key) const;
  // Records `id` as applied. Precondition: Check(id, key) == kNew.
  void MarkApplied(PushId id, uint64_t key);
  bool Knows(uint64_t client_id) const { return clients_.contains(client_id); }

  // Unknown ids of a lower generation are refused as kExpired.
  uint64_t min_generation() const { return min_generation_; }
  size_t client_count() const { return clients_.size(); }
  size_t recent_count() const { return recent_count_; }
  uint64_t evictions() const { return evictions_; }
  const Options& options() const { return options_; }

  Record Export() const;
  // Replaces the state with `record` (validated: recent entries inside the window, ids unique,
  // within the bounds).
  Status Import(const Record& record);

 private:
  struct Client {
    uint64_t key = 0;
    uint64_t contiguous = 0;
    std::set<uint64_t> recent;
    bool repeat = false;
    std::list<uint64_t>::iterator position;  // in once_ or repeat_
  };
  void EvictOne();
  std::list<uint64_t>& ListOf(const Client& c) { return c.repeat ? repeat_ : once_; }

  Options options_;
  std::unordered_map<uint64_t, Client> clients_;
  // Eviction order, least recently active first: clients that pushed once, then the others.
  std::list<uint64_t> once_;
  std::list<uint64_t> repeat_;
  uint64_t min_generation_ = 0;
  size_t recent_count_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace bx::ps
