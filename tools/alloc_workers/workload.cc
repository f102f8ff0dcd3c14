#include "workload.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace bx::alloc_bench {
namespace {

using Clock = std::chrono::steady_clock;

// Live blocks per thread: about 16 MiB of small and 20 MiB of large blocks each, enough that
// the working set is well beyond any per-thread cache.
constexpr size_t kSmallSlots = 2048;
constexpr size_t kLargeSlots = 64;
constexpr size_t kSizeTable = 4096;  // pre-drawn sizes, so the random draw is not measured
constexpr int kHandOverPercent = 10;
constexpr int kInboxDrainEvery = 64;

std::vector<size_t> DrawSizes(bool large, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<size_t> sizes(kSizeTable);
  if (large) {
    // Exponential with mean 256 KiB above 64 KiB, redrawn above 1 MiB.
    std::exponential_distribution<double> exp(1.0 / (192.0 * 1024));
    for (size_t& s : sizes) {
      double v;
      do v = 64.0 * 1024 + exp(rng);
      while (v > 1024.0 * 1024);
      s = static_cast<size_t>(v);
    }
  } else {
    std::uniform_int_distribution<size_t> uniform(16, 16 * 1024);
    for (size_t& s : sizes) s = uniform(rng);
  }
  return sizes;
}

uint64_t ResidentBytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
  std::fclose(f);
  return static_cast<uint64_t>(pages_resident) * sysconf(_SC_PAGESIZE);
}

uint64_t PeakResidentBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

struct Inbox {
  std::mutex mu;
  std::vector<void*> blocks;
};

void Touch(void* p, size_t size) {
  auto* bytes = static_cast<volatile char*>(p);
  for (size_t i = 0; i < size; i += 4096) bytes[i] = static_cast<char>(i);
  bytes[size - 1] = 1;
}

// Lets the workers go, then samples memory every 5 ms until `seconds` have passed: the peak of
// registered bytes, and resident and registered bytes at the middle and at the end.
void RunAndSample(const Allocator& allocator, std::atomic<bool>& go, double seconds,
                  RunResult& result) {
  const auto start = Clock::now();
  go.store(true, std::memory_order_release);
  const auto duration =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  const auto middle = start + duration / 2, end = start + duration;
  bool mid_taken = false;
  for (auto now = start; now < end; now = Clock::now()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const uint64_t registered = allocator.registered_bytes ? allocator.registered_bytes() : 0;
    const uint64_t resident = ResidentBytes();
    result.peak_registered_bytes = std::max(result.peak_registered_bytes, registered);
    if (!mid_taken && Clock::now() >= middle) {
      mid_taken = true;
      result.registered_mid_bytes = registered;
      result.resident_mid_bytes = resident;
    }
    result.registered_end_bytes = registered;
    result.resident_end_bytes = resident;
  }
}

// The flags a run's threads share: each counts itself `ready`, waits for `go`, works until `stop`.
struct RunFlags {
  std::atomic<int>& ready;
  std::atomic<bool>& go;
  std::atomic<bool>& stop;
};

// Waits for every thread of `pool` to be ready, runs and samples them for `seconds`, stops and
// joins them, then frees what they left (`free_leftovers`) and sums up.
RunResult Measure(const Allocator& allocator, double seconds, uint64_t resident_before,
                  RunFlags flags, std::vector<std::thread>& pool,
                  const std::vector<uint64_t>& operations,
                  const std::function<void()>& free_leftovers) {
  while (flags.ready.load() < static_cast<int>(pool.size())) std::this_thread::yield();
  RunResult result;
  const uint64_t registrations_before = allocator.registrations ? allocator.registrations() : 0;
  const auto start = Clock::now();
  RunAndSample(allocator, flags.go, seconds, result);
  flags.stop.store(true);
  for (std::thread& t : pool) t.join();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  free_leftovers();
  for (uint64_t ops : operations) result.operations += ops;
  const uint64_t peak = PeakResidentBytes();
  result.peak_bytes = peak > resident_before ? peak - resident_before : 0;
  if (allocator.registrations) {
    result.registrations = allocator.registrations() - registrations_before;
  }
  return result;
}

// One producer's hand-over queue to its consumer, holding at most `capacity` blocks.
struct HandOver {
  std::mutex mu;
  std::deque<void*> blocks;  // guarded by mu
};

}  // namespace

RunResult RunThroughput(const Allocator& allocator, bool large, int threads, double seconds) {
  const size_t slots = large ? kLargeSlots : kSmallSlots;
  std::vector<Inbox> inboxes(threads);
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<uint64_t> operations(threads, 0);
  const uint64_t resident_before = ResidentBytes();

  auto worker = [&](int index) {
    std::vector<size_t> sizes = DrawSizes(large, 1000 + index);
    std::vector<void*> live(slots, nullptr);
    uint64_t x = 0x9e3779b97f4a7c15ull * (index + 1);
    size_t next_size = 0;
    uint64_t ops = 0;
    ready++;
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
      size_t slot = x % slots;
      if (void* old = live[slot]) {
        if (threads > 1 && (x >> 32) % 100 < kHandOverPercent) {
          Inbox& next = inboxes[(index + 1) % threads];
          std::lock_guard<std::mutex> lock(next.mu);
          next.blocks.push_back(old);
        } else {
          allocator.deallocate(old);
          ++ops;
        }
      }
      size_t size = sizes[next_size++ % kSizeTable];
      void* p = allocator.allocate(size);
      if (p == nullptr) std::abort();
      Touch(p, size);
      live[slot] = p;
      ++ops;
      if (i % kInboxDrainEvery == 0) {
        std::vector<void*> mine;
        {
          std::lock_guard<std::mutex> lock(inboxes[index].mu);
          mine.swap(inboxes[index].blocks);
        }
        for (void* q : mine) allocator.deallocate(q);
        ops += mine.size();
      }
    }
    operations[index] = ops;
    for (void* p : live) {
      if (p != nullptr) allocator.deallocate(p);
    }
  };

  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  return Measure(allocator, seconds, resident_before, {ready, go, stop}, pool, operations, [&] {
    for (Inbox& inbox : inboxes) {
      for (void* p : inbox.blocks) allocator.deallocate(p);
    }
  });
}

RunResult RunProducerConsumer(const Allocator& allocator, bool large, int threads, double seconds) {
  const int pairs = threads / 2;
  // In flight per pair: the live blocks of one thread of the mixed pattern.
  const size_t capacity = large ? kLargeSlots : kSmallSlots;
  std::vector<HandOver> queues(pairs);
  std::atomic<bool> stop{false}, go{false};
  std::atomic<int> ready{0};
  std::vector<uint64_t> operations(2 * pairs, 0);
  const uint64_t resident_before = ResidentBytes();

  auto producer = [&](int pair) {
    std::vector<size_t> sizes = DrawSizes(large, 2000 + pair);
    HandOver& queue = queues[pair];
    uint64_t ops = 0;
    ready++;
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    for (size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      const size_t size = sizes[i % kSizeTable];
      void* p = allocator.allocate(size);
      if (p == nullptr) std::abort();
      Touch(p, size);
      ++ops;
      for (;;) {
        {
          std::lock_guard lock(queue.mu);
          if (queue.blocks.size() < capacity) {
            queue.blocks.push_back(p);
            break;
          }
        }
        if (stop.load(std::memory_order_relaxed)) {
          allocator.deallocate(p);
          break;
        }
        std::this_thread::yield();
      }
    }
    operations[2 * pair] = ops;
  };
  auto consumer = [&](int pair) {
    HandOver& queue = queues[pair];
    std::deque<void*> taken;
    uint64_t ops = 0;
    ready++;
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    while (!stop.load(std::memory_order_relaxed)) {
      {
        std::lock_guard lock(queue.mu);
        taken.swap(queue.blocks);
      }
      if (taken.empty()) std::this_thread::yield();
      for (void* p : taken) allocator.deallocate(p);
      ops += taken.size();
      taken.clear();
    }
    operations[2 * pair + 1] = ops;
  };

  std::vector<std::thread> pool;
  for (int pair = 0; pair < pairs; ++pair) {
    pool.emplace_back(producer, pair);
    pool.emplace_back(consumer, pair);
  }
  return Measure(allocator, seconds, resident_before, {ready, go, stop}, pool, operations, [&] {
    for (HandOver& queue : queues) {
      for (void* p : queue.blocks) allocator.deallocate(p);
    }
  });
}

int WorkerMain(int argc, char** argv, const Allocator& allocator) {
  std::string sizes = "small";
  std::string pattern = "mixed";
  int threads = 1;
  double seconds = 0.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--sizes") {
      sizes = argv[i + 1];
    } else if (flag == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (flag == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (flag == "--pattern") {
      pattern = argv[i + 1];
    } else {
      std::fprintf(stderr, "%s: unknown flag %s\n", argv[0], flag.c_str());
      return 2;
    }
  }
  const bool producer_consumer = pattern == "producer-consumer";
  if ((sizes != "small" && sizes != "large") || threads < 1 || threads > 256 || seconds <= 0 ||
      (pattern != "mixed" && !producer_consumer) || (producer_consumer && threads % 2 != 0)) {
    std::fprintf(stderr,
                 "usage: %s --sizes small|large --threads N --seconds S "
                 "[--pattern mixed|producer-consumer (N even)]\n",
                 argv[0]);
    return 2;
  }
  RunResult r = producer_consumer
                    ? RunProducerConsumer(allocator, sizes == "large", threads, seconds)
                    : RunThroughput(allocator, sizes == "large", threads, seconds);
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf(
      "{\"allocator\":\"%s\",\"sizes\":\"%s\",\"pattern\":\"%s\",\"threads\":%d,"
      "\"ops_per_sec\":%.0f,\"peak_bytes\":%llu,\"resident_mid_bytes\":%llu,"
      "\"resident_end_bytes\":%llu,\"seconds\":%.3f",
      allocator.name.c_str(), sizes.c_str(), pattern.c_str(), threads, r.operations / r.seconds,
      u(r.peak_bytes), u(r.resident_mid_bytes), u(r.resident_end_bytes), r.seconds);
  if (allocator.registered_bytes) {
    std::printf(
        ",\"peak_registered_bytes\":%llu,\"registered_mid_bytes\":%llu,"
        "\"registered_end_bytes\":%llu,\"registrations\":%llu",
        u(r.peak_registered_bytes), u(r.registered_mid_bytes), u(r.registered_end_bytes),
        u(r.registrations));
  }
  std::printf("}\n");
  return 0;
}

}  // namespace bx::alloc_bench
