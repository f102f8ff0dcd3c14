#include "alloc/thread_heap.h"

#include <pthread.h>

#include <mutex>
#include <new>

namespace bx::alloc {

void* ThreadHeap::AllocateSmallSlow(int c) {
  DrainRemote();
  Span* span = active_[c];
  if (span != nullptr && (span->free_list != nullptr || span->carved < span->block_count)) {
    return Allocate(kClassBytes[c]);
  }
  if (span != nullptr) span->state = Span::kFull;  // its frees bring it back as partial
  active_[c] = nullptr;
  span = partial_[c];
  if (span != nullptr) {
    Unlink(&partial_[c], span);
  } else {
    span = TakeSpan(1);
    if (span == nullptr) return nullptr;
    span->kind = Span::kSmall;
    span->size_class = static_cast<uint8_t>(c);
    span->block_bytes = kClassBytes[c];
    span->block_count = BlocksPerSpan(c);
    span->carved = 0;
    span->used = 0;
    span->free_list = nullptr;
  }
  span->state = Span::kActive;
  active_[c] = span;
  return Allocate(kClassBytes[c]);  // served by the span now
}

void* ThreadHeap::AllocateSpan(size_t bytes) {
  if (bytes > (size_t{1} << 46)) return nullptr;  // beyond any address space; UnitsFor would wrap
  const size_t units = UnitsFor(bytes);
  Span* span = nullptr;
  if (units > kMaxLargeUnits) {
    bool zeroed = false;
    span = static_cast<Span*>(pool_->Take(units << kUnitShift, kUnitBytes, &zeroed));
    if (span == nullptr) return nullptr;
    new (span) Span{};
    span->units = units;
    span->kind = Span::kHuge;  // no owner: freed to the pool from any thread
  } else {
    span = TakeSpan(units);
    if (span == nullptr) return nullptr;
    span->kind = Span::kLarge;
  }
  span->state = Span::kActive;
  return span->first_block();
}

void ThreadHeap::DrainRemote() {
  void* block = remote_.exchange(nullptr, std::memory_order_acquire);
  while (block != nullptr) {
    void* next = *static_cast<void**>(block);
    FreeLocal(SpanOf(block), block);
    block = next;
  }
}

Span* ThreadHeap::TakeSpan(size_t units) {
  if (empty_[units] == nullptr) DrainRemote();  // blocks other threads freed may fill the gap
  // Only an exact fit: split spans would never join again while cached, and the pool,
  // which joins neighbours, holds the rest.
  if (Span* span = empty_[units]; span != nullptr) {
    Unlink(&empty_[units], span);
    cached_bytes_ -= span->bytes();
    return span;
  }
  bool zeroed = false;
  void* memory = pool_->Take(units << kUnitShift, kUnitBytes, &zeroed);
  if (memory == nullptr && cached_bytes_ > 0) {
    // The cache may hold the pool's last room (a registered-memory budget): give it back.
    ReleaseAll();
    memory = pool_->Take(units << kUnitShift, kUnitBytes, &zeroed);
  }
  if (memory == nullptr) return nullptr;
  auto* span = new (memory) Span{};
  span->owner = this;
  span->units = units;
  return span;
}

void ThreadHeap::ReleaseSpan(Span* span) {
  span->state = Span::kEmpty;
  if (span->bytes() > cache_limit_) return pool_->Give(span, span->bytes());
  // The newest span stays: the largest cached ones make room (the sizes freed last are the
  // likeliest to be asked for next).
  for (size_t units = kMaxLargeUnits; units > 0 && cached_bytes_ + span->bytes() > cache_limit_;
       --units) {
    while (Span* old = empty_[units]) {
      if (cached_bytes_ + span->bytes() <= cache_limit_) break;
      Unlink(&empty_[units], old);
      cached_bytes_ -= old->bytes();
      pool_->Give(old, old->bytes());
    }
  }
  Push(&empty_[span->units], span);
  cached_bytes_ += span->bytes();
}

void ThreadHeap::ReleaseAll() {
  DrainRemote();
  for (int c = 0; c < kClassCount; ++c) {
    if (Span* span = active_[c]; span != nullptr && span->used == 0) {
      active_[c] = nullptr;
      pool_->Give(span, span->bytes());
    }
  }
  for (Span*& list : empty_) {
    while (Span* span = list) {
      Unlink(&list, span);
      pool_->Give(span, span->bytes());
    }
  }
  cached_bytes_ = 0;
}

void ThreadHeap::MakePartial(Span* span) {
  span->state = Span::kPartial;
  Push(&partial_[span->size_class], span);
}

void ThreadHeap::Push(Span** list, Span* span) {
  span->prev = nullptr;
  span->next = *list;
  if (*list != nullptr) (*list)->prev = span;
  *list = span;
}

void ThreadHeap::Unlink(Span** list, Span* span) {
  if (span->prev != nullptr) {
    span->prev->next = span->next;
  } else {
    *list = span->next;
  }
  if (span->next != nullptr) span->next->prev = span->prev;
  span->prev = span->next = nullptr;
}

void FreeHuge(RegionPool* pool, Span* span) {
  pool->Give(span, span->bytes());
}

namespace {

struct HeapRegistry {
  RegionPool* pool = nullptr;
  size_t cache_bytes = 0;
  pthread_key_t exit_key{};  // its destructor orphans the exiting thread's heap
  std::mutex mu;
  ThreadHeap* orphans = nullptr;  // guarded by mu
};
// Set once by InitHeaps; never destroyed (threads exit after static destructors have run).
std::atomic<HeapRegistry*> g_registry{nullptr};

// pthread key destructors run after the thread's C++ thread_local destructors, so buffers those
// free or allocate still find the heap; one allocated after this runs adopts a heap again (and
// sets the key again, which glibc honours for up to PTHREAD_DESTRUCTOR_ITERATIONS rounds).
void OrphanHeap(void* arg) {
  auto* heap = static_cast<ThreadHeap*>(arg);
  heap->ReleaseAll();
  t_heap = nullptr;
  HeapRegistry* registry = g_registry.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(registry->mu);
  heap->next_orphan = registry->orphans;
  registry->orphans = heap;
}

}  // namespace

Status InitHeaps(RegionPool* pool, size_t cache_bytes) {
  auto* registry = new HeapRegistry;
  registry->pool = pool;
  registry->cache_bytes = cache_bytes;
  if (int err = pthread_key_create(&registry->exit_key, OrphanHeap); err != 0) {
    delete registry;
    return Status::FromErrno(err, "bemalloc: pthread_key_create for thread heaps");
  }
  g_registry.store(registry, std::memory_order_release);
  return Status::Ok();
}

ThreadHeap* AdoptHeap() {
  HeapRegistry* registry = g_registry.load(std::memory_order_acquire);
  if (registry == nullptr) return nullptr;
  ThreadHeap* heap = nullptr;
  {
    std::lock_guard<std::mutex> lock(registry->mu);
    heap = registry->orphans;
    if (heap != nullptr) registry->orphans = heap->next_orphan;
  }
  if (heap == nullptr) heap = new ThreadHeap(registry->pool, registry->cache_bytes);
  heap->next_orphan = nullptr;
  pthread_setspecific(registry->exit_key, heap);
  t_heap = heap;
  return heap;
}

void ReleaseOrphans() {
  HeapRegistry* registry = g_registry.load(std::memory_order_acquire);
  if (registry == nullptr) return;
  std::lock_guard<std::mutex> lock(registry->mu);
  for (ThreadHeap* heap = registry->orphans; heap != nullptr; heap = heap->next_orphan) {
    heap->ReleaseAll();
  }
}

}  // namespace bx::alloc
