// RegionTable: maps any address to the registered region containing it in O(1).
//
// Regions are 2 MiB-aligned and a multiple of 2 MiB long, so every 2 MiB slot of the address
// space belongs to at most one region. The table has one entry per slot, indexed by
// address >> 21, in two levels (the top level covers 47 bits of user address space in 8192
// leaves of 16384 slots; a leaf is 128 KiB and is allocated the first time one of its slots is
// set, and never freed). Lookup is two dependent loads and takes no lock.
//
// Threads: Find from any thread at any time. Set/Clear are serialised by the caller (the pool's
// mutex); a Find racing with a Clear of the same region is a use-after-free by the caller.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "bx/bemalloc.h"

namespace bx::alloc {

// The component's public types (bx/bemalloc.h); this folder is its implementation.
using bemalloc::MemoryRegion;

inline constexpr int kSlotShift = 21;  // 2 MiB slots
inline constexpr size_t kSlotBytes = size_t{1} << kSlotShift;

class RegionTable {
 public:
  RegionTable() = default;
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;
  // Frees the leaves: no lookup may run concurrently with destruction (the process-wide table is
  // never destroyed; tables in tests are).
  ~RegionTable();

  const MemoryRegion* Find(const void* p) const {
    uintptr_t slot = reinterpret_cast<uintptr_t>(p) >> kSlotShift;
    if (slot >> (kTopBits + kLeafBits) != 0) return nullptr;
    const Leaf* leaf = top_[slot >> kLeafBits].load(std::memory_order_acquire);
    if (leaf == nullptr) return nullptr;
    return (*leaf)[slot & (kLeafSlots - 1)].load(std::memory_order_acquire);
  }

  // Points every slot of [region->base, +length) at region. Returns false when a leaf cannot be
  // allocated or the region is outside the covered address space.
  bool Set(const MemoryRegion* region);
  void Clear(const MemoryRegion* region);

 private:
  static constexpr int kLeafBits = 14;
  static constexpr int kTopBits = 47 - kSlotShift - kLeafBits;
  static constexpr size_t kLeafSlots = size_t{1} << kLeafBits;
  using Leaf = std::array<std::atomic<const MemoryRegion*>, kLeafSlots>;

  bool SetRange(const MemoryRegion* region, const MemoryRegion* value);

  std::array<std::atomic<Leaf*>, size_t{1} << kTopBits> top_{};
};

}  // namespace bx::alloc
