// The allocator benchmark workload of paper Figure 4, shared by one worker executable per
// allocator (each allocator runs in its own process so none replaces another's malloc).
//
// Each thread keeps a fixed number of live blocks and, for as long as the run lasts, frees a
// random one and allocates a new one in its place, touching every page of it (so that peak
// memory is memory really used). Sizes: "small" linear in 16 B-16 KiB, "large" exponentially
// distributed in 64 KiB-1 MiB. With two or more threads, one free in ten is handed to the next
// thread, which frees it (cross-thread free). An operation is one allocation or one free.
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
};

RunResult RunThroughput(const Allocator& allocator, bool large, int threads, double seconds);

// The main() of a worker: parses the arguments `bx bench alloc` passes (--sizes small|large
// --threads N --seconds S, or --footprint --seconds S --interval-ms M) and prints one JSON
// object on stdout. Returns the process exit code.
int WorkerMain(int argc, char** argv, const Allocator& allocator);

}  // namespace bx::alloc_bench
