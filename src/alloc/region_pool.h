// RegionPool: the registered memory under bemalloc's thread heaps.
//
// A region is one mmap of a 2 MiB-aligned, 2 MiB-multiple range, registered once. The heaps
// take spans of regions (Take) and hand them back (Give); the pool tracks, per region, which
// ranges no heap holds. Take reuses such free ranges of registered regions before it maps and
// registers a new region, so registration happens only while the pool grows. A region whose ranges
// have all come back is empty; empty regions beyond Options::keep_empty_bytes are deregistered and
// unmapped (see bemalloc.h).
//
// Threads: all methods may be called from any thread; one mutex serialises them (they run only
// when a heap grows or shrinks, never per allocation), except Find, which takes no lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "alloc/region_table.h"
#include "bx/bemalloc.h"

namespace bx::alloc {

// The component's public types (bx/bemalloc.h); this folder is its implementation.
using bemalloc::Counters;
using bemalloc::MemoryRegion;
using bemalloc::RegionKeys;
using bemalloc::Registrar;

class RegionPool {
 public:
  // max_registered_bytes: the budget (0: none); see Options::max_registered_bytes.
  RegionPool(std::unique_ptr<Registrar> registrar, size_t min_region_bytes, size_t keep_empty_bytes,
             size_t max_registered_bytes = 0);
  RegionPool(const RegionPool&) = delete;
  RegionPool& operator=(const RegionPool&) = delete;

  // Returns `size` bytes aligned to `alignment` inside one registered region, or nullptr. Sets
  // *zeroed when the bytes are known to be zero.
  void* Take(size_t size, size_t alignment, bool* zeroed);
  // Returns a range that Take handed out (or part of one) to the pool.
  void Give(void* addr, size_t size);
  // Deregisters and unmaps empty regions until at most `keep_bytes` of them remain.
  void ReleaseEmpty(size_t keep_bytes);

  const MemoryRegion* Find(const void* p) const { return table_.Find(p); }
  Counters counters() const;
  // Why the last Take failed (OK once a Take succeeds again).
  Status last_error() const;

 private:
  struct Region {
    MemoryRegion info;
    std::map<uintptr_t, size_t> free_ranges;  // start address -> length, coalesced
    size_t free_bytes = 0;
    bool empty() const { return free_bytes == info.length; }
  };

  // A free range that can hold a request, and the bytes it would have left.
  struct Fit {
    Region* region = nullptr;
    std::map<uintptr_t, size_t>::iterator range;
    size_t leftover = 0;
  };
  // Replaces *best with a range of `region` that fits with less left over, if there is one.
  static void FindFit(Region& region, size_t size, size_t alignment, Fit* best);
  void* Carve(const Fit& fit, size_t size, size_t alignment);
  Region* MapAndRegister(size_t size, size_t alignment);
  Region* Containing(uintptr_t addr);
  void SetEmptyBytes(size_t bytes);
  void Unregister(Region* region);
  void ReleaseEmptyLocked(size_t keep_bytes);

  const std::unique_ptr<Registrar> registrar_;
  const size_t min_region_bytes_;
  const size_t keep_empty_bytes_;
  const size_t max_registered_bytes_;
  RegionTable table_;

  mutable std::mutex mu_;
  std::map<uintptr_t, std::unique_ptr<Region>> regions_;  // by base address; guarded by mu_
  size_t empty_bytes_ = 0;                                // guarded by mu_
  Status last_error_;                                     // guarded by mu_

  std::atomic<uint64_t> registered_bytes_{0};
  std::atomic<uint64_t> region_count_{0};
  std::atomic<uint64_t> empty_region_bytes_{0};
  std::atomic<uint64_t> registrations_{0};
  std::atomic<uint64_t> deregistrations_{0};
  std::atomic<uint64_t> registration_failures_{0};
  std::atomic<uint64_t> budget_refusals_{0};
};

}  // namespace bx::alloc
