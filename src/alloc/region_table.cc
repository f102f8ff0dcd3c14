#include "alloc/region_table.h"

#include <cstdlib>
#include <new>

namespace bx::alloc {

bool RegionTable::Set(const MemoryRegion* region) {
  return SetRange(region, region);
}

void RegionTable::Clear(const MemoryRegion* region) {
  SetRange(region, nullptr);
}

RegionTable::~RegionTable() {
  for (std::atomic<Leaf*>& entry : top_) std::free(entry.load(std::memory_order_acquire));
}

bool RegionTable::SetRange(const MemoryRegion* region, const MemoryRegion* value) {
  uintptr_t first = reinterpret_cast<uintptr_t>(region->base) >> kSlotShift;
  uintptr_t last = (reinterpret_cast<uintptr_t>(region->base) + region->length - 1) >> kSlotShift;
  if (last >> (kTopBits + kLeafBits) != 0) return false;
  for (uintptr_t slot = first; slot <= last; ++slot) {
    std::atomic<Leaf*>& top_entry = top_[slot >> kLeafBits];
    Leaf* leaf = top_entry.load(std::memory_order_acquire);
    if (leaf == nullptr) {
      if (value == nullptr) continue;
      // calloc, not new: a zeroed leaf is a leaf of null pointers. Leaves live as long as the
      // table.
      leaf = static_cast<Leaf*>(std::calloc(1, sizeof(Leaf)));
      if (leaf == nullptr) return false;
      top_entry.store(leaf, std::memory_order_release);
    }
    (*leaf)[slot & (kLeafSlots - 1)].store(value, std::memory_order_release);
  }
  return true;
}

}  // namespace bx::alloc
