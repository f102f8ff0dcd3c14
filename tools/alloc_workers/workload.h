// The allocator benchmark workload of paper Figure 4, shared by one worker executable per
// allocator (each allocator runs in its own process so none replaces another's malloc).
//
// Each thread keeps a fixed number of live blocks and, for as long as the run lasts, frees a
// random one and allocates a new one in its place, touching every page of it (so that peak
// memory is memory really used). Sizes: "small" linear in 16 B-16 KiB, "large" exponentially
// distributed in 64 KiB-1 MiB. With two or more threads, one free in ten is handed to the next
// thread, which frees it (cross-thread free). An operation is one allocation or one free.
//
// The producer/consumer pattern frees every block on another thread: threads pair up, one
// allocating (and touching) blocks and handing each to its partner, which frees it, as an RPC
// worker's responses are freed by the I/O thread that sent them. Each pair keeps at most a
// fixed number of blocks in flight, so memory the allocator holds beyond that is its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace bx::alloc_bench {

struct Allocator {
  std::string name;
  void* (*allocate)(size_t) = nullptr;
  void (*deallocate)(void*) = nullptr;
  // Optional: bytes the allocator has registered with the NIC now (bemalloc only).
  std::function<uint64_t()> registered_bytes;
  // Optional: registrations so far (bemalloc only).
  std::function<uint64_t()> registrations;
};

struct RunResult {
  uint64_t operations = 0;
  double seconds = 0;
  uint64_t peak_bytes = 0;             // peak resident set growth over the run
  uint64_t peak_registered_bytes = 0;  // bemalloc only
  uint64_t registrations = 0;          // bemalloc only, during the run
  // Sampled at the middle and at the end of the run: growth between them is memory that the
  // pattern's steady state keeps taking.
  uint64_t resident_mid_bytes = 0, resident_end_bytes = 0;
  uint64_t registered_mid_bytes = 0, registered_end_bytes = 0;  // bemalloc only
};

enum class Pattern { kMixed, kProducerConsumer };

RunResult RunThroughput(const Allocator& allocator, bool large, int threads, double seconds);
// `threads` even: threads / 2 producer/consumer pairs.
RunResult RunProducerConsumer(const Allocator& allocator, bool large, int threads, double seconds);

// The main() of a worker: parses the arguments `bx bench alloc` passes (--sizes small|large
// --threads N --seconds S [--pattern mixed|producer-consumer], or --footprint --seconds S
// --interval-ms M) and prints one JSON object on stdout. Returns the process exit code.
int WorkerMain(int argc, char** argv, const Allocator& allocator);

}  // namespace bx::alloc_bench
