// SingleWriterCounter: a count that one thread raises and any thread reads. The writer does a
// relaxed load and store, not a locked add, so counting on a hot path (an I/O thread's poll
// loop) costs what a plain increment does; readers see a recent value, never a torn one.
#pragma once

#include <atomic>
#include <cstdint>

namespace bx {

class SingleWriterCounter {
 public:
  // The owning thread only.
  void Add(uint64_t n = 1) {
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  // Any thread.
  uint64_t Get() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

}  // namespace bx
