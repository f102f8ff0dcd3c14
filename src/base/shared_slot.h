// A shared_ptr that one thread replaces while others read it (a gate, a service set at run time).
// Not std::atomic<std::shared_ptr>: libstdc++ 12's load() releases its internal lock with relaxed
// order, so a store after a load races on the stored pointer (TSan reports it, rightly). An
// uncontended mutex costs tens of nanoseconds, far below any RPC this guards.
#pragma once

#include <memory>
#include <mutex>

namespace bx {

template <typename T>
class SharedSlot {
 public:
  std::shared_ptr<T> Load() const {
    std::lock_guard lock(mu_);
    return value_;
  }

  // The old value is released outside the lock: its destructor may take locks of its own.
  void Store(std::shared_ptr<T> value) {
    {
      std::lock_guard lock(mu_);
      value_.swap(value);
    }
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<T> value_;
};

}  // namespace bx
