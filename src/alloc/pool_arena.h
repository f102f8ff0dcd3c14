// PoolArena: the jemalloc arena whose block callbacks (extent hooks) draw on a RegionPool.
//
// jemalloc 5.3 lets an arena be created with custom extent hooks (arenas.create). Ours:
//   alloc    takes a range from the pool (which maps and registers a new region when it must);
//            in-place growth at a fixed address is refused;
//   dalloc,  hand the range back to the pool, which may release the region when it is empty;
//   destroy
//   commit   succeeds: pool memory is always committed;
//   decommit, purge_lazy, purge_forced  are refused: they would unmap or madvise registered
//            pages behind the NIC's back;
//   split    is allowed;
//   merge    is allowed only within one region: an extent must never span two registrations.
//
// Threads: the hooks run on whichever thread jemalloc runs them; the pool serialises them.
#pragma once

#include "alloc/region_pool.h"
#include "bx/bemalloc.h"

namespace bx::bemalloc::internal {

// Creates the arena over `pool` (which must live for the rest of the process) and returns its
// index, for MALLOCX_ARENA.
Result<unsigned> CreatePoolArena(RegionPool* pool, const Options& options);

}  // namespace bx::bemalloc::internal
