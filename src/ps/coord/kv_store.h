// KvStore: the little a parameter-server shard needs from a consistent configuration store —
// versioned keys, an all-or-nothing compare-and-put, and leases that expire keys with their
// holder. Two implementations behind one interface: etcd (its v3 JSON gateway over HTTP; what
// `bx ps serve` uses across processes) and an in-process map (the embedded default: `bx demo`,
// single-process clusters and tests). The semantics are etcd's (docs/PS.md "Configuration and
// leases"): revisions are one store-wide counter that every successful write raises; a key's
// mod_revision is the revision of its last write and create_revision that of its creation (both
// 0 for an absent key); a key put with a lease is deleted when the lease expires or is revoked.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "bx/status.h"

namespace bx::ps {

struct KvEntry {
  std::string value;
  int64_t mod_revision = 0;
  int64_t create_revision = 0;
  int64_t lease = 0;  // 0: the key is not bound to a lease
};

// One condition of a Commit: the key's revision of the given kind equals `revision`.
// {key, kCreate, 0} means "the key does not exist".
struct KvCompare {
  enum class Target { kMod, kCreate };
  std::string key;
  Target target = Target::kMod;
  int64_t revision = 0;
};

struct KvPut {
  std::string key;
  std::string value;
  int64_t lease = 0;  // 0: no lease; otherwise the key dies with this lease
};

struct KvLease {
  int64_t id = 0;
  std::chrono::milliseconds ttl{0};  // as granted (etcd rounds up to whole seconds)
};

class KvStore {
 public:
  virtual ~KvStore() = default;

  // The entry of `key`, or nullopt when it does not exist.
  virtual Result<std::optional<KvEntry>> Get(const std::string& key) = 0;

  // If every compare holds, applies every put atomically (one new revision) and returns true;
  // otherwise changes nothing and returns false. An error means the outcome is unknown (e.g. a
  // timeout after the request left): callers re-read before deciding.
  virtual Result<bool> Commit(std::span<const KvCompare> compares, std::span<const KvPut> puts) = 0;

  // A new lease that expires `ttl` after its last renewal (the store may grant more).
  virtual Result<KvLease> GrantLease(std::chrono::milliseconds ttl) = 0;
  // Renews `lease` for its full ttl, returned. NotFound when it has already expired or was
  // revoked (its keys are gone).
  virtual Result<std::chrono::milliseconds> KeepAlive(int64_t lease) = 0;
  // Ends `lease` now, deleting its keys. OK when it had already expired.
  virtual Status RevokeLease(int64_t lease) = 0;

  // Where the store lives, for logs ("etcd http://10.0.0.1:2379", "in-process").
  virtual std::string Describe() const = 0;
};

// The in-process store. Leases expire on the steady clock (any ttl > 0, no rounding).
std::unique_ptr<KvStore> NewMemoryKvStore();

// Tests: an outage of an in-process store, as etcd has them. kDown: every call fails with
// Unavailable (etcd stopped, paused or unreachable). Back up, its leases are as etcd leaves them:
// kRestarted renews every lease for its full ttl (a restarted etcd's new leader does), kResumedLate
// has every lease expired (etcd paused for longer than every ttl). InvalidArgument for a store
// that is not in-process.
enum class KvOutage { kDown, kRestarted, kResumedLate };
Status SetMemoryKvStoreOutage(KvStore* store, KvOutage outage);

// An etcd v3 cluster reached through its JSON gateway at `endpoints`: one client URL
// ("http://host:port") or the members' URLs separated by commas, as etcdctl --endpoints takes
// them. Requests go to one member and move on when it does not answer (see EtcdKvStore). Every
// request has `timeout`. Nothing is sent until the first call.
Result<std::unique_ptr<KvStore>> OpenEtcdKvStore(const std::string& endpoints,
                                                 std::chrono::milliseconds timeout);

// "http://host:port" (etcd, as OpenEtcdKvStore) or "memory://<name>" (the process's in-process
// store of that name, created on first use and shared by every caller naming it).
Result<std::shared_ptr<KvStore>> OpenKvStore(const std::string& url,
                                             std::chrono::milliseconds timeout);

}  // namespace bx::ps
