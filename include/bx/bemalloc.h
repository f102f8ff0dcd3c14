// bemalloc: a global pool of RDMA-registered memory with the interface of a general-purpose
// allocator (paper section 5.2, Figure 3).
//
// bemalloc maps 2 MiB-aligned regions and registers each one once with the NIC, so registration
// is paid per region (megabytes), not per message. Any pointer returned by Allocate() lies inside
// one registered region, whose keys GetMR() finds in O(1) through a table indexed by
// address >> 21.
//
// Inside the regions bemalloc is an allocator of its own, shaped like rpmalloc (the allocator the
// paper built bemalloc on): every thread allocates from its own heap of 64 KiB spans, with no
// lock on the fast path; a block freed on another thread goes back to its owner's heap through a
// lock-free list. It leaves the process's malloc alone and keeps no thread-local storage that
// must be reserved at start-up, so a library that holds it (libbexpress.so) can be loaded late,
// by dlopen() (a Python extension module).
//
// Threads: after Init(), Allocate, Deallocate, GetMR, Lkey, Rkey, UsableSize, GetCounters and
// Trim may be called from any thread, concurrently. A pointer may be freed by a thread other than
// the one that allocated it. A thread's heap outlives the thread: when it exits, the heap keeps
// the blocks still allocated from it, and the next new thread takes it over.
//
// Pool growth and shrinking: the pool grows whenever a heap needs a span that no registered
// region can supply. A heap keeps the spans of blocks that came back, up to
// Options::thread_cache_bytes of wholly empty ones, and hands the rest back to the pool at once;
// a region whose every byte has come back is empty. Empty regions are kept registered, up to
// Options::keep_empty_bytes in total, so that a workload that breathes does not register again;
// beyond that they are deregistered and unmapped at once. Trim() returns every empty region. So
// registration happens while the pool grows to the workload's high-water mark, and not in the
// steady state. Blocks freed on another thread come back to their span when the owning thread
// next allocates past its fast path (or exits), so a thread that stops allocating keeps its spans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "bx/export.h"
#include "bx/status.h"

namespace bx::bemalloc {

// What registering one region produced: the keys the NIC knows it by and an opaque handle for
// Deregister (an ibv_mr* for the verbs registrar).
struct BX_EXPORT RegionKeys {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  void* handle = nullptr;
};

// Registers and deregisters regions with a NIC. bemalloc calls it on whichever thread made the
// pool grow or shrink, one call at a time (bemalloc serialises them). An implementation may call
// malloc, but must not call bemalloc.
class BX_EXPORT Registrar {
 public:
  virtual ~Registrar() = default;
  virtual Result<RegionKeys> Register(void* addr, size_t length) = 0;
  virtual Status Deregister(const RegionKeys& keys) = 0;
};

// One registered region: the unit of registration and of GetMR().
struct BX_EXPORT MemoryRegion {
  void* base = nullptr;
  size_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  void* handle = nullptr;  // from the Registrar (ibv_mr* for verbs)

  bool Contains(const void* p, size_t n = 1) const {
    auto a = reinterpret_cast<uintptr_t>(p);
    auto b = reinterpret_cast<uintptr_t>(base);
    return a >= b && n <= length && a - b <= length - n;
  }
};

struct BX_EXPORT Options {
  // The smallest region the pool maps and registers; a larger request gets a region of its own
  // size (rounded up to 2 MiB). 8 MiB amortises one registration over thousands of small
  // allocations while an idle region is still a small thing to keep pinned.
  size_t min_region_bytes = size_t{8} << 20;
  // Empty regions kept registered for reuse before they are deregistered (the shrink policy).
  size_t keep_empty_bytes = size_t{64} << 20;
  // Wholly empty spans each thread's heap keeps for its next allocations before it hands them
  // back to the pool: 4 MiB holds a few of the largest messages RDMA carries (1-2 MiB) without
  // a trip through the pool's lock for each.
  size_t thread_cache_bytes = size_t{4} << 20;
  // The most bytes the pool keeps registered (pinned) at once; 0: no budget. An allocation that
  // would need a new region beyond it fails at once (Allocate returns nullptr, LastGrowthError
  // names the budget; Buffer::Allocate returns that ResourceExhausted), after empty regions
  // were released to make room. Memory freed back to the pool is allocated again within it.
  size_t max_registered_bytes = 0;
};

struct BX_EXPORT Counters {
  uint64_t registered_bytes = 0;    // bytes in registered regions now
  uint64_t regions = 0;             // registered regions now
  uint64_t empty_region_bytes = 0;  // of registered_bytes, in regions with nothing allocated
  uint64_t registrations = 0;       // Register calls that succeeded, since Init
  uint64_t deregistrations = 0;     // regions deregistered, since Init
  uint64_t registration_failures = 0;
  uint64_t budget_refusals = 0;  // regions not registered: Options::max_registered_bytes
  uint64_t budget_bytes = 0;     // Options::max_registered_bytes (0: no budget)
};

// Creates the pool. Call once per process, before any other function here; the registrar lives
// until the process exits. Returns FailedPrecondition when called again.
BX_EXPORT Status Init(std::unique_ptr<Registrar> registrar, const Options& options = {});
BX_EXPORT bool IsInitialized();

// Returns at least `size` bytes (1 when size is 0) of registered memory aligned to 16 bytes, or
// nullptr when the pool cannot grow (out of memory, registration failed) or Init was not called.
BX_EXPORT void* Allocate(size_t size);
// Frees memory from Allocate(); nullptr is ignored. Debug builds abort with a message when `p`
// does not lie in a bemalloc region.
BX_EXPORT void Deallocate(void* p);
// Bytes usable at p (>= the size requested).
BX_EXPORT size_t UsableSize(const void* p);

// The region containing p (any interior pointer), or nullptr when p is not bemalloc memory. O(1):
// two dependent loads. The result stays valid while any allocation inside it is live.
BX_EXPORT const MemoryRegion* GetMR(const void* p);
// Keys of the region containing p; 0 when p is not bemalloc memory.
BX_EXPORT uint32_t Lkey(const void* p);
BX_EXPORT uint32_t Rkey(const void* p);

BX_EXPORT Counters GetCounters();
// Why the pool last failed to supply a heap (the budget, mmap, registration); OK once it
// succeeds again, or when it never failed. Process-wide: under concurrent failures, one of them.
BX_EXPORT Status LastGrowthError();
// Hands the calling thread's empty spans (and those of exited threads) back to the pool and
// deregisters every empty region. Other live threads' heaps are not touched.
BX_EXPORT void Trim();

}  // namespace bx::bemalloc
