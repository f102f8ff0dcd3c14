// FakeRegistrar: a Registrar that remembers what it registered, for tests without a NIC.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

#include "bx/bemalloc.h"

namespace bx::bemalloc::testing {

class FakeRegistrar : public Registrar {
 public:
  Result<RegionKeys> Register(void* addr, size_t length) override {
    if (fail_next_.exchange(false)) return Unavailable("fake: registration refused");
    std::lock_guard<std::mutex> lock(mu_);
    uint32_t key = ++next_key_;
    ranges_[reinterpret_cast<uintptr_t>(addr)] = {length, key};
    return RegionKeys{key, key + 0x10000u, addr};
  }
  Status Deregister(const RegionKeys& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ranges_.erase(reinterpret_cast<uintptr_t>(keys.handle)) == 0) {
      return NotFound("fake: not registered");
    }
    return Status::Ok();
  }

  // True when [addr, addr+length) lies inside one registered range.
  bool IsRegistered(const void* addr, size_t length) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto a = reinterpret_cast<uintptr_t>(addr);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return false;
    --it;
    return a + length <= it->first + it->second.length;
  }
  void FailNextRegistration() { fail_next_ = true; }

 private:
  struct Range {
    size_t length;
    uint32_t key;
  };
  mutable std::mutex mu_;
  std::map<uintptr_t, Range> ranges_;
  uint32_t next_key_ = 0;
  std::atomic<bool> fail_next_{false};
};

}  // namespace bx::bemalloc::testing
