#include "footprint.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bx/bemalloc.h"

namespace bx::alloc_bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kThreads = 2;
constexpr size_t kSlotsPerThread = 512;  // ~34 MiB live per thread at the plateau
constexpr double kRampFraction = 0.3;
constexpr double kPlateauFraction = 0.4;

size_t DrawSize(uint64_t& x) {
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  if ((x >> 40) % 5 == 0) return 64 * 1024 + (x >> 20) % (960 * 1024);
  return 16 + (x >> 20) % (16 * 1024 - 16);
}

struct Sample {
  long t_ms;
  bemalloc::Counters counters;
  uint64_t live_bytes;
};

}  // namespace

int FootprintMain(int argc, char** argv) {
  double seconds = 4;
  long interval_ms = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (flag == "--interval-ms") {
      interval_ms = std::atol(argv[i + 1]);
    } else {
      std::fprintf(stderr, "footprint: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (seconds <= 0 || interval_ms <= 0) return 2;

  const auto start = Clock::now();
  const auto ramp = std::chrono::duration<double>(seconds * kRampFraction);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> live_bytes{0};
  auto worker = [&](int index) {
    std::vector<void*> live(kSlotsPerThread, nullptr);
    std::vector<size_t> sizes(kSlotsPerThread, 0);
    uint64_t x = 0x2545f4914f6cdd1dull * (index + 1);
    while (!stop.load(std::memory_order_relaxed)) {
      double progress = std::chrono::duration<double>(Clock::now() - start) / ramp;
      size_t active =
          progress >= 1 ? kSlotsPerThread : static_cast<size_t>(progress * kSlotsPerThread) + 1;
      for (int i = 0; i < 64; ++i) {
        size_t slot = (x >> 8) % active;
        // Each slot keeps the size it was first given: the live set is then constant once the
        // ramp is over, the steady pattern whose footprint should plateau.
        if (sizes[slot] == 0) sizes[slot] = DrawSize(x);
        size_t size = sizes[slot];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (live[slot] != nullptr) {
          bemalloc::Deallocate(live[slot]);
          live_bytes.fetch_sub(sizes[slot], std::memory_order_relaxed);
        }
        live[slot] = bemalloc::Allocate(size);
        if (live[slot] == nullptr) std::abort();
        static_cast<char*>(live[slot])[0] = 1;
        live_bytes.fetch_add(size, std::memory_order_relaxed);
      }
    }
    for (void* p : live) bemalloc::Deallocate(p);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);

  std::vector<Sample> samples;
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (auto next = start; next <= end; next += std::chrono::milliseconds(interval_ms)) {
    std::this_thread::sleep_until(next);
    long t_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    samples.push_back({t_ms, bemalloc::GetCounters(), live_bytes.load()});
  }
  stop = true;
  for (std::thread& t : threads) t.join();

  const long plateau_start_ms = static_cast<long>(seconds * kPlateauFraction * 1000);
  const Sample* plateau_first = nullptr;
  std::printf("{\"samples\":[");
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (plateau_first == nullptr && s.t_ms >= plateau_start_ms) plateau_first = &s;
    std::printf(
        "%s{\"t_ms\":%ld,\"registered_bytes\":%llu,\"regions\":%llu,\"registrations\":%llu,"
        "\"deregistrations\":%llu,\"live_bytes\":%llu}",
        i == 0 ? "" : ",", s.t_ms, static_cast<unsigned long long>(s.counters.registered_bytes),
        static_cast<unsigned long long>(s.counters.regions),
        static_cast<unsigned long long>(s.counters.registrations),
        static_cast<unsigned long long>(s.counters.deregistrations),
        static_cast<unsigned long long>(s.live_bytes));
  }
  uint64_t during = 0;
  if (plateau_first != nullptr) {
    during = samples.back().counters.registrations - plateau_first->counters.registrations;
  }
  std::printf("],\"plateau_start_ms\":%ld,\"registrations_during_plateau\":%llu}\n",
              plateau_start_ms, static_cast<unsigned long long>(during));
  return 0;
}

}  // namespace bx::alloc_bench
