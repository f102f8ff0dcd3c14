#include "bx/bemalloc.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "alloc/region_pool.h"
#include "alloc/thread_heap.h"
#include "base/log_internal.h"

namespace bx::bemalloc {
namespace {

using alloc::RegionPool;
using alloc::Span;
using alloc::ThreadHeap;

// Set once by Init and never cleared: the pool outlives every thread that might still free
// into it, including thread-exit and static destructors.
std::atomic<RegionPool*> g_pool{nullptr};

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
  BX_RETURN_IF_ERROR(alloc::InitHeaps(pool, options.thread_cache_bytes)
                         .WithContext("bemalloc::Init"));  // pool is leaked
  g_pool.store(pool, std::memory_order_release);
  return Status::Ok();
}

bool IsInitialized() {
  return g_pool.load(std::memory_order_acquire) != nullptr;
}

void* Allocate(size_t size) {
  ThreadHeap* heap = alloc::t_heap;
  if (__builtin_expect(heap == nullptr, 0)) {
    if (g_pool.load(std::memory_order_acquire) == nullptr) return nullptr;  // not initialised
    heap = alloc::AdoptHeap();
  }
  return heap->Allocate(size == 0 ? 1 : size);
}

void Deallocate(void* p) {
  if (p == nullptr) return;
#ifndef NDEBUG
  if (GetMR(p) == nullptr) DieForeignPointer("Deallocate", p);
#endif
  Span* span = alloc::SpanOf(p);
  if (span->kind == Span::kHuge)
    return alloc::FreeHuge(g_pool.load(std::memory_order_relaxed), span);
  ThreadHeap* heap = alloc::t_heap;
  if (span->owner == heap) return heap->FreeLocal(span, p);
  span->owner->PushRemote(p);
}

size_t UsableSize(const void* p) {
#ifndef NDEBUG
  if (GetMR(p) == nullptr) DieForeignPointer("UsableSize", p);
#endif
  const Span* span = alloc::SpanOf(p);
  return span->kind == Span::kSmall ? span->block_bytes : span->bytes() - alloc::kSpanHeaderBytes;
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
  if (ThreadHeap* heap = alloc::t_heap; heap != nullptr) heap->ReleaseAll();
  alloc::ReleaseOrphans();
  pool->ReleaseEmpty(0);
}

}  // namespace bx::bemalloc
