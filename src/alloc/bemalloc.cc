#include "bx/bemalloc.h"

#include <jemalloc/jemalloc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "alloc/pool_arena.h"
#include "alloc/region_pool.h"
#include "alloc/thread_cache.h"
#include "base/log_internal.h"

// jemalloc reads this at start-up (declared extern "C" by jemalloc.h); bemalloc.h says why each
// option is needed.
const char* malloc_conf = "retain:false,tcache_max:1048576,lg_extent_max_active_fit:20";

namespace bx::bemalloc {
namespace {

using internal::RegionPool;

// Set once by Init and never cleared: the pool outlives every thread that might still free
// into it, including thread-exit and static destructors.
std::atomic<RegionPool*> g_pool{nullptr};
std::vector<unsigned> g_arenas;  // set once by Init

[[noreturn, maybe_unused]] void DieForeignPointer(const char* function, const void* p) {
  char message[256];
  std::snprintf(message, sizeof(message),
                "bemalloc::%s(%p): pointer was not allocated by bemalloc (no registered region "
                "contains it)",
                function, p);
  FatalError(message);
}

}  // namespace

Status Init(std::unique_ptr<Registrar> registrar, const Options& options) {
  static std::mutex init_mu;
  std::lock_guard<std::mutex> lock(init_mu);
  if (g_pool.load(std::memory_order_acquire) != nullptr) {
    return FailedPrecondition("bemalloc::Init: already initialised");
  }
  if (registrar == nullptr) return InvalidArgument("bemalloc::Init: no registrar");
  // Deliberately leaked: see g_pool.
  auto* pool = new RegionPool(std::move(registrar), options.min_region_bytes,
                              options.keep_empty_bytes, options.max_registered_bytes);
  // One arena per CPU, as jemalloc has several automatic arenas: with a single arena every
  // thread would contend for the same bin locks when its cache fills or empties. They share the
  // pool, so registered memory one arena releases another can take.
  unsigned cpus = std::thread::hardware_concurrency();
  size_t arena_count = options.arenas != 0 ? options.arenas : (cpus == 0 ? 1 : cpus);
  for (size_t i = 0; i < arena_count; ++i) {
    Result<unsigned> arena = internal::CreatePoolArena(pool, options);
    if (!arena.ok()) return arena.status().WithContext("bemalloc::Init");  // pool is leaked
    g_arenas.push_back(*arena);
  }
  internal::InitThreadCaches(g_arenas);
  g_pool.store(pool, std::memory_order_release);
  return Status::Ok();
}

bool IsInitialized() {
  return g_pool.load(std::memory_order_acquire) != nullptr;
}

void* Allocate(size_t size) {
  int flags = internal::ThreadFlags();
  if (flags == 0) return nullptr;  // not initialised
  internal::t_free_share.Note(false);
  return mallocx(size == 0 ? 1 : size, flags);
}

void Deallocate(void* p) {
  if (p == nullptr) return;
#ifndef NDEBUG
  if (GetMR(p) == nullptr) DieForeignPointer("Deallocate", p);
#endif
  dallocx(p, internal::FreeFlags());
}

size_t UsableSize(const void* p) {
#ifndef NDEBUG
  if (GetMR(p) == nullptr) DieForeignPointer("UsableSize", p);
#endif
  return sallocx(const_cast<void*>(p), 0);
}

const MemoryRegion* GetMR(const void* p) {
  RegionPool* pool = g_pool.load(std::memory_order_acquire);
  return pool == nullptr ? nullptr : pool->Find(p);
}

uint32_t Lkey(const void* p) {
  const MemoryRegion* region = GetMR(p);
  return region == nullptr ? 0 : region->lkey;
}

uint32_t Rkey(const void* p) {
  const MemoryRegion* region = GetMR(p);
  return region == nullptr ? 0 : region->rkey;
}

Counters GetCounters() {
  RegionPool* pool = g_pool.load(std::memory_order_acquire);
  return pool == nullptr ? Counters{} : pool->counters();
}

Status LastGrowthError() {
  RegionPool* pool = g_pool.load(std::memory_order_acquire);
  return pool == nullptr ? Status::Ok() : pool->last_error();
}

void Trim() {
  RegionPool* pool = g_pool.load(std::memory_order_acquire);
  if (pool == nullptr) return;
  internal::FlushThreadCache();
  for (unsigned arena : g_arenas) {
    std::string purge = "arena." + std::to_string(arena) + ".purge";
    mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0);
  }
  pool->ReleaseEmpty(0);
}

}  // namespace bx::bemalloc
