// bemalloc: a global pool of RDMA-registered memory with the interface of a general-purpose
// allocator (paper section 5.2, Figure 3).
//
// bemalloc runs jemalloc on a dedicated arena whose block callbacks (extent hooks) map 2 MiB-
// aligned regions and register each one once with the NIC, so registration is paid per region
// (megabytes), not per message. Any pointer returned by Allocate() lies inside one registered
// region, whose keys GetMR() finds in O(1) through a table indexed by address >> 21.
//
// Threads: after Init(), Allocate, Deallocate, GetMR, Lkey, Rkey, UsableSize, GetCounters and
// Trim may be called from any thread, concurrently. A pointer may be freed by a thread other than
// the one that allocated it. Each thread gets its own cache, destroyed when the thread exits.
//
// Process-wide effects (read before linking): Debian's jemalloc has no symbol prefix, so linking
// bx_alloc makes jemalloc the process's malloc. A shared library that itself links jemalloc
// cannot be dlopen()ed afterwards ("cannot allocate memory in static TLS block"); link such a
// library at build time instead, or set LD_PRELOAD=libjemalloc.so.2 for the process.
// bx_alloc also defines jemalloc's `malloc_conf` (in bemalloc.cc):
//   retain:false         without it jemalloc keeps the unused tail of every block it asks for
//                        in a "retained" state that it never hands back, so no region could
//                        ever become empty and be released (it also makes jemalloc ask for
//                        exactly what it needs rather than geometrically growing blocks);
//   tcache_max:1048576   thread caches hold blocks up to 1 MiB, not 32 KiB, so the messages of
//                        64 KiB-1 MiB that RDMA carries are cached per thread (2x throughput).
//   lg_extent_max_active_fit:20
//                        freed memory (jemalloc's dirty extents) may be split for a request up
//                        to 2^20 times smaller, not 2^6: freed blocks coalesce into long runs,
//                        and with the default a producer/consumer pattern (blocks allocated on
//                        one thread, freed on another) could reuse none of them, taking new
//                        memory from the pool for ever (738 MB registered after 10 s for 16 MiB
//                        in flight; 48 MB with this).
// All apply to the process's ordinary malloc too. MALLOC_CONF in the environment still
// overrides them; a program that defines its own malloc_conf cannot link bx_alloc (duplicate
// symbol) and should include these options in its own.
//
// Cross-thread frees: a thread that frees many more blocks than it allocates (an I/O thread
// freeing the responses a worker allocated) frees them past its thread cache, straight back to
// the arena that owns them, where the allocating thread finds them again; its cache would
// otherwise hold up to 20 blocks of every size class up to 1 MiB (~130 MB) that it never uses.
//
// Pool growth and shrinking: the pool grows whenever jemalloc needs memory that no registered
// region can supply. jemalloc hands memory back after it has been unused for its decay time
// (10 s by default); a region whose every byte has come back is empty. Empty regions are kept
// registered, up to Options::keep_empty_bytes in total, so that a workload that breathes does not
// register again; beyond that they are deregistered and unmapped at once. Trim() returns every
// empty region. So registration happens while the pool grows to the workload's high-water mark,
// and not in the steady state.
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

// Registers and deregisters regions with a NIC. bemalloc calls it from inside jemalloc's block
// callbacks, on whichever thread made jemalloc grow or shrink, one call at a time (bemalloc
// serialises them). An implementation may call malloc, but must not call bemalloc.
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
  // jemalloc's arena.<i>.dirty_decay_ms for the pool arena: how long freed memory stays with
  // jemalloc before it is handed back to the pool. -1 keeps jemalloc's default (10 s).
  long dirty_decay_ms = -1;
  // jemalloc arenas over the pool; threads are spread over them. 0: one per CPU.
  size_t arenas = 0;
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
// Why the pool last failed to supply jemalloc (the budget, mmap, registration); OK once it
// succeeds again, or when it never failed. Process-wide: under concurrent failures, one of them.
BX_EXPORT Status LastGrowthError();
// Flushes the calling thread's cache, hands all of jemalloc's unused memory back to the pool and
// deregisters every empty region. Other threads' caches are not touched.
BX_EXPORT void Trim();

}  // namespace bx::bemalloc
