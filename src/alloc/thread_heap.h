// ThreadHeap: one thread's spans of registered memory, and the span header they share.
//
// Each thread allocates from its own heap, with no lock and no atomic on the fast path: a
// small block is popped from the free list of the heap's active span for its class (or carved
// from the span's untouched tail). A block freed on its owner's thread goes straight back to
// its span's free list. A block freed on any other thread is pushed (one compare-and-swap) onto
// the owner heap's remote list, which the owner drains on its next slow path, so every span is
// only ever changed by one thread at a time. Spans whose blocks all came back are kept in the
// heap's cache of empty spans (up to Options::thread_cache_bytes) and beyond that handed back
// to the pool, which releases regions that become empty.
//
// A heap outlives its thread: at thread exit it gives back its empty spans and joins the
// orphans, with the blocks still live in it; the next new thread adopts it (and drains what was
// freed into it meanwhile). Heaps are never destroyed.
//
// Threads: a heap's methods run on its owner thread only (or, for an orphan, under the registry
// lock), except PushRemote, which any thread may call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "alloc/region_pool.h"
#include "alloc/size_class.h"

namespace bx::alloc {

class ThreadHeap;

// The header in a span's first kSpanHeaderBytes.
struct Span {
  enum Kind : uint8_t { kSmall, kLarge, kHuge };
  enum State : uint8_t { kActive, kPartial, kFull, kEmpty };

  // Set when a heap takes the span; read by any thread freeing a block of it (that block's
  // allocation ordered the write before the read).
  ThreadHeap* owner;
  size_t units;
  Kind kind;
  State state;
  uint8_t size_class;
  // The owner's alone.
  uint32_t block_bytes;
  uint32_t block_count;
  uint32_t carved;  // blocks handed out from the never-used tail so far
  uint32_t used;
  void* free_list;
  Span* prev;  // the heap's list this span is on: its class's partial spans, or empty spans
  Span* next;

  size_t bytes() const { return units << kUnitShift; }
  char* first_block() { return reinterpret_cast<char*>(this) + kSpanHeaderBytes; }
};
static_assert(sizeof(Span) <= kSpanHeaderBytes);

inline Span* SpanOf(const void* block) {
  return reinterpret_cast<Span*>(reinterpret_cast<uintptr_t>(block) & ~(kUnitBytes - 1));
}

class ThreadHeap {
 public:
  ThreadHeap(RegionPool* pool, size_t cache_bytes) : pool_(pool), cache_limit_(cache_bytes) {}
  ThreadHeap(const ThreadHeap&) = delete;
  ThreadHeap& operator=(const ThreadHeap&) = delete;

  void* Allocate(size_t bytes) {
    if (bytes > kMaxSmallBytes) return AllocateSpan(bytes);
    const int c = ClassOf(bytes);
    if (Span* span = active_[c]; span != nullptr) {
      if (void* block = span->free_list; block != nullptr) {
        span->free_list = *static_cast<void**>(block);
        ++span->used;
        return block;
      }
      if (span->carved < span->block_count) {
        ++span->used;
        return span->first_block() + size_t{span->carved++} * span->block_bytes;
      }
    }
    return AllocateSmallSlow(c);
  }

  // A block of this heap, freed on the owner thread.
  void FreeLocal(Span* span, void* block) {
    if (span->kind != Span::kSmall) return ReleaseSpan(span);
    *static_cast<void**>(block) = span->free_list;
    span->free_list = block;
    --span->used;
    if (span->state == Span::kFull) {
      MakePartial(span);
    } else if (span->used == 0 && span->state == Span::kPartial) {
      Unlink(&partial_[span->size_class], span);
      ReleaseSpan(span);
    }
  }

  // A block of this heap, freed on another thread.
  void PushRemote(void* block) {
    void* head = remote_.load(std::memory_order_relaxed);
    do {
      *static_cast<void**>(block) = head;
    } while (!remote_.compare_exchange_weak(head, block, std::memory_order_release,
                                            std::memory_order_relaxed));
  }

  // Frees what other threads pushed; gives every empty span, cached or active, to the pool.
  void ReleaseAll();

  ThreadHeap* next_orphan = nullptr;  // the registry's

 private:
  void* AllocateSmallSlow(int c);
  void* AllocateSpan(size_t bytes);
  void DrainRemote();
  Span* TakeSpan(size_t units);
  void ReleaseSpan(Span* span);
  void MakePartial(Span* span);
  static void Push(Span** list, Span* span);
  static void Unlink(Span** list, Span* span);

  RegionPool* const pool_;
  const size_t cache_limit_;
  Span* active_[kClassCount] = {};
  Span* partial_[kClassCount] = {};
  Span* empty_[kMaxLargeUnits + 1] = {};  // by units
  size_t cached_bytes_ = 0;
  alignas(64) std::atomic<void*> remote_{nullptr};
};

// Frees a huge block (any thread: it has no owner).
void FreeHuge(RegionPool* pool, Span* span);

// The calling thread's heap; nullptr until the thread's first allocation.
inline thread_local ThreadHeap* t_heap = nullptr;

// The registry of heaps: one per live thread, adopted from the orphans of exited threads.
Status InitHeaps(RegionPool* pool, size_t cache_bytes);
// Gives the calling thread a heap (nullptr before InitHeaps).
ThreadHeap* AdoptHeap();
// ReleaseAll on every orphan (heaps of exited threads not yet adopted).
void ReleaseOrphans();

}  // namespace bx::alloc
