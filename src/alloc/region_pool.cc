#include "alloc/region_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace bx::alloc {
namespace {

uintptr_t AlignUp(uintptr_t value, size_t alignment) {
  return (value + alignment - 1) & ~(uintptr_t{alignment} - 1);
}

}  // namespace

RegionPool::RegionPool(std::unique_ptr<Registrar> registrar, size_t min_region_bytes,
                       size_t keep_empty_bytes, size_t max_registered_bytes)
    : registrar_(std::move(registrar)),
      min_region_bytes_(min_region_bytes),
      keep_empty_bytes_(keep_empty_bytes),
      max_registered_bytes_(max_registered_bytes) {}

void* RegionPool::Take(size_t size, size_t alignment, bool* zeroed) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || size == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  *zeroed = false;
  // The best fit among regions already in use, then an empty region: best fit keeps the long
  // free runs long (first fit cut them up for small requests until a large one found none), and
  // empty regions stay empty, so they can be released.
  Fit best;
  for (auto& [base, region] : regions_) {
    if (region->empty() || region->free_bytes < size) continue;
    FindFit(*region, size, alignment, &best);
    if (best.region != nullptr && best.leftover == 0) break;
  }
  if (best.region == nullptr) {
    for (auto& [base, region] : regions_) {
      if (!region->empty() || region->free_bytes < size) continue;
      FindFit(*region, size, alignment, &best);
      if (best.region != nullptr) break;
    }
  }
  if (best.region != nullptr) {
    last_error_ = Status::Ok();
    return Carve(best, size, alignment);
  }
  Region* region = MapAndRegister(size, alignment);
  if (region == nullptr) return nullptr;
  *zeroed = true;  // fresh anonymous mapping
  FindFit(*region, size, alignment, &best);
  return best.region == nullptr ? nullptr : Carve(best, size, alignment);
}

void RegionPool::FindFit(Region& region, size_t size, size_t alignment, Fit* best) {
  for (auto it = region.free_ranges.begin(); it != region.free_ranges.end(); ++it) {
    uintptr_t start = it->first;
    uintptr_t end = start + it->second;
    uintptr_t aligned = AlignUp(start, alignment);
    if (aligned < start || aligned > end || end - aligned < size) continue;
    size_t leftover = it->second - size;
    if (best->region == nullptr || leftover < best->leftover) *best = Fit{&region, it, leftover};
    if (leftover == 0) return;
  }
}

void* RegionPool::Carve(const Fit& fit, size_t size, size_t alignment) {
  Region& region = *fit.region;
  uintptr_t start = fit.range->first;
  uintptr_t end = start + fit.range->second;
  uintptr_t aligned = AlignUp(start, alignment);
  bool was_empty = region.empty();
  region.free_ranges.erase(fit.range);
  if (aligned > start) region.free_ranges.emplace(start, aligned - start);
  if (aligned + size < end) region.free_ranges.emplace(aligned + size, end - aligned - size);
  region.free_bytes -= size;
  if (was_empty) SetEmptyBytes(empty_bytes_ - region.info.length);
  return reinterpret_cast<void*>(aligned);
}

void RegionPool::Give(void* addr, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto start = reinterpret_cast<uintptr_t>(addr);
  Region* region = Containing(start);
  if (region == nullptr || !region->info.Contains(addr, size)) return;  // not ours: ignore
  auto [it, inserted] = region->free_ranges.emplace(start, size);
  if (!inserted) return;  // given twice: a heap or pool bug; keep the accounting sane
  if (auto next = std::next(it);
      next != region->free_ranges.end() && it->first + it->second == next->first) {
    it->second += next->second;
    region->free_ranges.erase(next);
  }
  if (it != region->free_ranges.begin()) {
    if (auto prev = std::prev(it); prev->first + prev->second == it->first) {
      prev->second += it->second;
      region->free_ranges.erase(it);
    }
  }
  region->free_bytes += size;
  if (region->empty()) {
    SetEmptyBytes(empty_bytes_ + region->info.length);
    ReleaseEmptyLocked(keep_empty_bytes_);
  }
}

void RegionPool::ReleaseEmpty(size_t keep_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseEmptyLocked(keep_bytes);
}

void RegionPool::ReleaseEmptyLocked(size_t keep_bytes) {
  for (auto it = regions_.begin(); it != regions_.end() && empty_bytes_ > keep_bytes;) {
    if (!it->second->empty()) {
      ++it;
      continue;
    }
    SetEmptyBytes(empty_bytes_ - it->second->info.length);
    Unregister(it->second.get());
    it = regions_.erase(it);
  }
}

RegionPool::Region* RegionPool::Containing(uintptr_t addr) {
  auto it = regions_.upper_bound(addr);
  if (it == regions_.begin()) return nullptr;
  --it;
  Region* region = it->second.get();
  return region->info.Contains(reinterpret_cast<void*>(addr)) ? region : nullptr;
}

RegionPool::Region* RegionPool::MapAndRegister(size_t size, size_t alignment) {
  size_t length = AlignUp(size > min_region_bytes_ ? size : min_region_bytes_, kSlotBytes);
  size_t map_alignment = alignment > kSlotBytes ? alignment : kSlotBytes;
  if (length < size || length + map_alignment < length) return nullptr;
  if (max_registered_bytes_ != 0) {
    // Within the budget: empty regions too small for this request go first, then a region
    // that would still cross it is refused at once (the caller gets an error, never a wait).
    if (registered_bytes_.load(std::memory_order_relaxed) + length > max_registered_bytes_) {
      ReleaseEmptyLocked(0);
    }
    const uint64_t registered = registered_bytes_.load(std::memory_order_relaxed);
    if (registered + length > max_registered_bytes_) {
      budget_refusals_.fetch_add(1, std::memory_order_relaxed);
      last_error_ = ResourceExhausted(
          "bemalloc: the registered-memory budget (Options::max_registered_bytes, " +
          std::to_string(max_registered_bytes_) +
          " bytes) is reached: " + std::to_string(registered) + " registered, a region of " +
          std::to_string(length) + " more needed; free buffers or raise the budget");
      return nullptr;
    }
  }
  // Over-map by the alignment and trim both ends, so the region starts on a 2 MiB boundary and
  // owns whole table slots.
  size_t mapped = length + map_alignment;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    last_error_ = Status::FromErrno(errno, "bemalloc: mmap of " + std::to_string(length));
    return nullptr;
  }
  uintptr_t raw_start = reinterpret_cast<uintptr_t>(raw);
  uintptr_t base = AlignUp(raw_start, map_alignment);
  if (base > raw_start) munmap(raw, base - raw_start);
  if (uintptr_t tail = raw_start + mapped - (base + length); tail > 0) {
    munmap(reinterpret_cast<void*>(base + length), tail);
  }
  void* addr = reinterpret_cast<void*>(base);

  Result<RegionKeys> keys = registrar_->Register(addr, length);
  if (!keys.ok()) {
    munmap(addr, length);
    registration_failures_.fetch_add(1, std::memory_order_relaxed);
    last_error_ =
        keys.status().WithContext("bemalloc: registering " + std::to_string(length) + " bytes");
    return nullptr;
  }
  auto region = std::make_unique<Region>();
  region->info = MemoryRegion{addr, length, keys->lkey, keys->rkey, keys->handle};
  region->free_ranges.emplace(base, length);
  region->free_bytes = length;
  if (!table_.Set(&region->info)) {
    table_.Clear(&region->info);
    (void)registrar_->Deregister(*keys);
    munmap(addr, length);
    last_error_ = ResourceExhausted("bemalloc: region table cannot cover " + std::to_string(base));
    return nullptr;
  }
  registrations_.fetch_add(1, std::memory_order_relaxed);
  registered_bytes_.fetch_add(length, std::memory_order_relaxed);
  last_error_ = Status::Ok();
  region_count_.fetch_add(1, std::memory_order_relaxed);
  SetEmptyBytes(empty_bytes_ + length);
  Region* raw_region = region.get();
  regions_.emplace(base, std::move(region));
  return raw_region;
}

void RegionPool::Unregister(Region* region) {
  table_.Clear(&region->info);
  Status status =
      registrar_->Deregister(RegionKeys{region->info.lkey, region->info.rkey, region->info.handle});
  if (!status.ok()) last_error_ = status.WithContext("bemalloc: deregistering a region");
  munmap(region->info.base, region->info.length);
  deregistrations_.fetch_add(1, std::memory_order_relaxed);
  registered_bytes_.fetch_sub(region->info.length, std::memory_order_relaxed);
  region_count_.fetch_sub(1, std::memory_order_relaxed);
}

void RegionPool::SetEmptyBytes(size_t bytes) {
  empty_bytes_ = bytes;
  empty_region_bytes_.store(bytes, std::memory_order_relaxed);
}

Counters RegionPool::counters() const {
  Counters c;
  c.registered_bytes = registered_bytes_.load(std::memory_order_relaxed);
  c.regions = region_count_.load(std::memory_order_relaxed);
  c.empty_region_bytes = empty_region_bytes_.load(std::memory_order_relaxed);
  c.registrations = registrations_.load(std::memory_order_relaxed);
  c.deregistrations = deregistrations_.load(std::memory_order_relaxed);
  c.registration_failures = registration_failures_.load(std::memory_order_relaxed);
  c.budget_refusals = budget_refusals_.load(std::memory_order_relaxed);
  c.budget_bytes = max_registered_bytes_;
  return c;
}

Status RegionPool::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

}  // namespace bx::alloc
