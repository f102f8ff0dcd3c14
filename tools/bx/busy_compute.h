// `bx demo --busy`: real model work on a training host. A trainer's step computes a
// single-precision matrix multiply sized to take `--compute-us`, and one background thread per
// core runs the same multiply for the whole demo, so both transports run on a host whose cores
// are all busy, as a real trainer's are (a stand-in that only spins on the clock does no memory
// traffic and leaves the other cores idle).
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace bx::tools::busy {

// C = A x B for n x n row-major float matrices, blocked so that a block of B stays in cache
// while the rows of A pass over it. Plain loops: gcc vectorises the inner one.
class MatMul {
 public:
  explicit MatMul(size_t n);
  size_t n() const { return n_; }
  // One multiply. Returns a checksum of C, which callers fold into Sink() so that the optimiser
  // cannot drop the work.
  float Run();

 private:
  size_t n_;
  std::vector<float> a_, b_, c_;
};

// Keeps multiply results observable (a relaxed atomic add: its cost is one per multiply).
void Sink(float checksum);

struct Calibration {
  size_t n = 0;                // matrix size
  double us_per_multiply = 0;  // measured at that size, thread CPU time
};

// The n whose multiply takes about `target_us` of this thread's CPU. Run at start-up, before the
// busy threads and before any clock the demo measures: on an idle core, so it is the work of the
// step, not the contention of the moment, that is calibrated.
Calibration Calibrate(double target_us);

// One thread per `threads` running MatMul(n) back to back from construction to destruction (the
// "model work" beside the demo). CpuNs() is their CPU, read from their per-thread CPU clocks, so
// that host CPU per request can leave it out.
class BusyHost {
 public:
  BusyHost(int threads, size_t n);
  ~BusyHost();
  BusyHost(const BusyHost&) = delete;
  BusyHost& operator=(const BusyHost&) = delete;

  int threads() const { return int(threads_.size()); }
  // CPU used by the compute threads so far, in ns.
  uint64_t CpuNs() const;
  // Multiplies they have completed so far.
  uint64_t Multiplies() const { return multiplies_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> multiplies_{0};
  std::vector<std::thread> threads_;
  std::vector<clockid_t> clocks_;  // each thread's CPU clock (pthread_getcpuclockid)
};

}  // namespace bx::tools::busy
