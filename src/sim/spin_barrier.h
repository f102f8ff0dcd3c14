// A barrier for the partitions of one run (simulation.cc). They meet a million times per simulated
// second, about every 100 us of work, so a waiting thread spins first (waking a sleeper costs tens
// of microseconds on a VM). It sleeps only after a while, which is what happens when the machine
// has fewer free cores than partitions: a spinner would then keep the thread it waits for off the
// core.
#pragma once

#include <atomic>
#include <cstdint>

namespace bx::sim {

class SpinBarrier {
 public:
  explicit SpinBarrier(uint32_t parties) : parties_(parties) {}

  // Returns once every party has called Wait; what each did before is visible to all after.
  void Wait() {
    uint32_t generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == parties_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(generation + 1, std::memory_order_seq_cst);
      if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
      return;
    }
    for (uint32_t spins = 0; spins < kSpins; ++spins) {
      if (generation_.load(std::memory_order_acquire) != generation) return;
      Relax();
    }
    // Announced before the last look, so the last party either sees a sleeper or this thread
    // sees the new generation (both sequentially consistent).
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    while (generation_.load(std::memory_order_seq_cst) == generation) {
      generation_.wait(generation, std::memory_order_seq_cst);
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  static constexpr uint32_t kSpins = 4096;  // some tens of microseconds
  static void Relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  const uint32_t parties_;
  alignas(64) std::atomic<uint32_t> arrived_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> sleepers_{0};
};

}  // namespace bx::sim
