// The in-process KvStore: a map and a lease table under one mutex, with etcd's revision and
// lease semantics (kv_store.h). Leases expire on the steady clock, checked lazily at the start
// of every call, so no thread is needed.
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "ps/coord/kv_store.h"

namespace bx::ps {
namespace {

using Clock = std::chrono::steady_clock;

class MemoryKvStore final : public KvStore {
 public:
  Result<std::optional<KvEntry>> Get(const std::string& key) override {
    if (key.empty()) return InvalidArgument("kv get: empty key");
    std::lock_guard lock(mu_);
    BX_RETURN_IF_ERROR(AnswerLocked());
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::optional<KvEntry>();
    return std::optional<KvEntry>(it->second);
  }

  Result<bool> Commit(std::span<const KvCompare> compares, std::span<const KvPut> puts) override {
    std::set<std::string_view> put_keys;
    for (const KvPut& p : puts) {
      if (p.key.empty()) return InvalidArgument("kv commit: put of an empty key");
      if (!put_keys.insert(p.key).second) {
        return InvalidArgument("kv commit: key '" + p.key + "' put twice in one commit");
      }
    }
    for (const KvCompare& c : compares) {
      if (c.key.empty()) return InvalidArgument("kv commit: compare of an empty key");
    }
    std::lock_guard lock(mu_);
    BX_RETURN_IF_ERROR(AnswerLocked());
    for (const KvCompare& c : compares) {
      auto it = entries_.find(c.key);
      int64_t actual = 0;
      if (it != entries_.end()) {
        actual = c.target == KvCompare::Target::kMod ? it->second.mod_revision
                                                     : it->second.create_revision;
      }
      if (actual != c.revision) return false;
    }
    // Like etcd, leases are checked only once the compares hold, and then fail the whole commit.
    for (const KvPut& p : puts) {
      if (p.lease != 0 && !leases_.contains(p.lease)) {
        return NotFound("kv commit: lease " + std::to_string(p.lease) + " of key '" + p.key +
                        "' not found (expired or revoked)");
      }
    }
    if (puts.empty()) return true;  // nothing written: the revision stays
    ++revision_;
    for (const KvPut& p : puts) {
      KvEntry& e = entries_[p.key];
      if (e.create_revision == 0) e.create_revision = revision_;
      if (e.lease != p.lease) {  // the key leaves its old lease (a live one: see EndLeaseLocked)
        if (auto old = leases_.find(e.lease); old != leases_.end()) old->second.keys.erase(p.key);
      }
      if (p.lease != 0) leases_.at(p.lease).keys.insert(p.key);
      e.value = p.value;
      e.mod_revision = revision_;
      e.lease = p.lease;
    }
    return true;
  }

  Result<KvLease> GrantLease(std::chrono::milliseconds ttl) override {
    if (ttl.count() <= 0) return InvalidArgument("kv grant lease: ttl must be positive");
    std::lock_guard lock(mu_);
    BX_RETURN_IF_ERROR(AnswerLocked());
    int64_t id = next_lease_++;
    Lease& l = leases_[id];
    l.ttl = ttl;
    l.deadline = Clock::now() + ttl;
    return KvLease{id, ttl};
  }

  Result<std::chrono::milliseconds> KeepAlive(int64_t lease) override {
    std::lock_guard lock(mu_);
    BX_RETURN_IF_ERROR(AnswerLocked());
    auto it = leases_.find(lease);
    if (it == leases_.end()) {
      return NotFound("kv keepalive: lease " + std::to_string(lease) +
                      " not found (expired or revoked)");
    }
    it->second.deadline = Clock::now() + it->second.ttl;
    return it->second.ttl;
  }

  Status RevokeLease(int64_t lease) override {
    std::lock_guard lock(mu_);
    BX_RETURN_IF_ERROR(AnswerLocked());
    auto it = leases_.find(lease);
    if (it != leases_.end()) EndLeaseLocked(it);
    return Status::Ok();
  }

  std::string Describe() const override { return "in-process"; }

  void SetOutage(KvOutage outage) {
    std::lock_guard lock(mu_);
    down_ = outage == KvOutage::kDown;
    const Clock::time_point now = Clock::now();
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (outage == KvOutage::kResumedLate) {
        it = EndLeaseLocked(it);
      } else {
        if (outage == KvOutage::kRestarted) it->second.deadline = now + it->second.ttl;
        ++it;
      }
    }
  }

 private:
  // Unavailable while down; otherwise expires the leases whose time is up.
  Status AnswerLocked() {
    if (down_) return Unavailable("in-process store is down (a test's outage)");
    ExpireLeasesLocked();
    return Status::Ok();
  }

  struct Lease {
    std::chrono::milliseconds ttl{0};
    Clock::time_point deadline;
    std::set<std::string> keys;
  };

  void ExpireLeasesLocked() {
    const Clock::time_point now = Clock::now();
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second.deadline <= now) {
        it = EndLeaseLocked(it);
      } else {
        ++it;
      }
    }
  }

  // Deletes the lease and its keys; like etcd, one revision for all of them (none if no key).
  std::unordered_map<int64_t, Lease>::iterator EndLeaseLocked(
      std::unordered_map<int64_t, Lease>::iterator it) {
    if (!it->second.keys.empty()) {
      ++revision_;
      for (const std::string& k : it->second.keys) entries_.erase(k);
    }
    return leases_.erase(it);
  }

  std::mutex mu_;
  std::map<std::string, KvEntry> entries_;
  std::unordered_map<int64_t, Lease> leases_;
  int64_t revision_ = 1;  // etcd's first revision; the first write makes it 2
  int64_t next_lease_ = 1;
  bool down_ = false;
};

}  // namespace

Status SetMemoryKvStoreOutage(KvStore* store, KvOutage outage) {
  auto* memory = dynamic_cast<MemoryKvStore*>(store);
  if (memory == nullptr) return InvalidArgument("not an in-process store");
  memory->SetOutage(outage);
  return Status::Ok();
}

std::unique_ptr<KvStore> NewMemoryKvStore() {
  return std::make_unique<MemoryKvStore>();
}

}  // namespace bx::ps
