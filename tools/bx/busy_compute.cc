#include "busy_compute.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>

namespace bx::tools::busy {
namespace {

// 64 x 64 floats of B are 16 KiB: a block fits in L1 beside a row of A and one of C.
constexpr size_t kBlock = 64;

std::atomic<uint32_t> sink{0};

uint64_t CpuNsOf(clockid_t clock) {
  timespec now{};
  clock_gettime(clock, &now);
  return uint64_t(now.tv_sec) * 1000000000 + uint64_t(now.tv_nsec);
}

// Median thread CPU time of a few multiplies at size n, in us (the median: one run that met a
// cold cache or an interrupt does not move it).
double MeasureUs(size_t n) {
  MatMul matmul(n);
  matmul.Run();  // first touch of the pages, not part of a step
  std::vector<double> us;
  for (int i = 0; i < 5; ++i) {
    const uint64_t start = CpuNsOf(CLOCK_THREAD_CPUTIME_ID);
    Sink(matmul.Run());
    us.push_back(double(CpuNsOf(CLOCK_THREAD_CPUTIME_ID) - start) / 1000.0);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

MatMul::MatMul(size_t n) : n_(n), a_(n * n), b_(n * n), c_(n * n) {
  // Fixed, bounded inputs: C is recomputed from them each time, so values never grow.
  for (size_t i = 0; i < n * n; ++i) {
    a_[i] = float(i % 7) * 0.25f - 0.75f;
    b_[i] = float(i % 5) * 0.5f - 1.0f;
  }
}

float MatMul::Run() {
  const size_t n = n_;
  std::fill(c_.begin(), c_.end(), 0.0f);
  for (size_t kk = 0; kk < n; kk += kBlock) {
    const size_t k_end = std::min(n, kk + kBlock);
    for (size_t jj = 0; jj < n; jj += kBlock) {
      const size_t j_end = std::min(n, jj + kBlock);
      for (size_t i = 0; i < n; ++i) {
        float* c = &c_[i * n];
        for (size_t k = kk; k < k_end; ++k) {
          const float a = a_[i * n + k];
          const float* b = &b_[k * n];
          for (size_t j = jj; j < j_end; ++j) c[j] += a * b[j];
        }
      }
    }
  }
  return c_[0] + c_[n * n / 2] + c_[n * n - 1];
}

void Sink(float checksum) {
  sink.fetch_add(uint32_t(int32_t(checksum)), std::memory_order_relaxed);
}

Calibration Calibrate(double target_us) {
  target_us = std::max(target_us, 1.0);
  // Doubling up to a quarter of the target, then two cube-root corrections (the work is n^3).
  size_t n = 8;
  double us = MeasureUs(n);
  while (us < target_us / 4 && n < 4096) {
    n *= 2;
    us = MeasureUs(n);
  }
  for (int step = 0; step < 2; ++step) {
    n = std::max<size_t>(4, size_t(std::lround(double(n) * std::cbrt(target_us / us))));
    us = MeasureUs(n);
  }
  return {n, us};
}

BusyHost::BusyHost(int threads, size_t n) {
  for (int t = 0; t < threads; ++t) {
    threads_.emplace_back([this, n] {
      MatMul matmul(n);
      while (!stop_.load(std::memory_order_relaxed)) {
        Sink(matmul.Run());
        multiplies_.fetch_add(1, std::memory_order_relaxed);
      }
    });
    pthread_setname_np(threads_.back().native_handle(), "bx-busy-compute");
    clockid_t clock{};
    // A thread's CPU clock is valid while it runs; ours run until the destructor joins them.
    if (pthread_getcpuclockid(threads_.back().native_handle(), &clock) == 0) {
      clocks_.push_back(clock);
    }
  }
}

BusyHost::~BusyHost() {
  stop_.store(true, std::memory_order_relaxed);
  for (std::thread& thread : threads_) thread.join();
}

uint64_t BusyHost::CpuNs() const {
  uint64_t total = 0;
  for (clockid_t clock : clocks_) total += CpuNsOf(clock);
  return total;
}

}  // namespace bx::tools::busy
