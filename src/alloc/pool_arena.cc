#include "alloc/pool_arena.h"

#include <jemalloc/jemalloc.h>
#include <sys/types.h>

#include <cstring>
#include <string>

namespace bx::bemalloc::internal {
namespace {

// jemalloc passes the hooks table back to every hook, so the pool travels behind it. The table
// comes first so that the pointer jemalloc holds is also a pointer to this struct.
struct PoolHooks {
  extent_hooks_t table;
  RegionPool* pool;
};
static_assert(offsetof(PoolHooks, table) == 0);

RegionPool* PoolOf(extent_hooks_t* hooks) {
  return reinterpret_cast<PoolHooks*>(hooks)->pool;
}

void* HookAlloc(extent_hooks_t* hooks, void* new_addr, size_t size, size_t alignment, bool* zero,
                bool* commit, unsigned /*arena_index*/) {
  if (new_addr != nullptr) return nullptr;  // jemalloc then places the extent elsewhere
  bool zeroed = false;
  void* p = PoolOf(hooks)->Take(size, alignment, &zeroed);
  if (p == nullptr) return nullptr;
  if (*zero && !zeroed) std::memset(p, 0, size);
  *zero = *zero || zeroed;
  *commit = true;
  return p;
}

bool HookDalloc(extent_hooks_t* hooks, void* addr, size_t size, bool /*committed*/, unsigned) {
  PoolOf(hooks)->Give(addr, size);
  return false;  // accepted: jemalloc forgets the range
}

void HookDestroy(extent_hooks_t* hooks, void* addr, size_t size, bool /*committed*/, unsigned) {
  PoolOf(hooks)->Give(addr, size);
}

bool HookCommit(extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) {
  return false;  // already committed
}

bool HookDecommit(extent_hooks_t*, void*, size_t, size_t, size_t, unsigned) {
  return true;  // refused: registered pages stay mapped
}

bool HookSplit(extent_hooks_t*, void*, size_t, size_t, size_t, bool, unsigned) {
  return false;  // allowed
}

bool HookMerge(extent_hooks_t* hooks, void* addr_a, size_t, void* addr_b, size_t, bool, unsigned) {
  RegionPool* pool = PoolOf(hooks);
  const MemoryRegion* a = pool->Find(addr_a);
  return a == nullptr || a != pool->Find(addr_b);  // true refuses
}

PoolHooks g_hooks = {
    {
        .alloc = HookAlloc,
        .dalloc = HookDalloc,
        .destroy = HookDestroy,
        .commit = HookCommit,
        .decommit = HookDecommit,
        .purge_lazy = nullptr,    // refused
        .purge_forced = nullptr,  // refused
        .split = HookSplit,
        .merge = HookMerge,
    },
    nullptr,
};

template <typename T>
Status SetArenaOption(unsigned arena, const char* name, T value) {
  std::string key = "arena." + std::to_string(arena) + "." + name;
  int err = mallctl(key.c_str(), nullptr, nullptr, &value, sizeof(value));
  return err == 0 ? Status::Ok() : Status::FromErrno(err, "mallctl " + key);
}

}  // namespace

Result<unsigned> CreatePoolArena(RegionPool* pool, const Options& options) {
  g_hooks.pool = pool;
  extent_hooks_t* hooks = &g_hooks.table;
  unsigned arena = 0;
  size_t arena_size = sizeof(arena);
  if (int err = mallctl("arenas.create", &arena, &arena_size, &hooks, sizeof(hooks)); err != 0) {
    return Status::FromErrno(err, "mallctl arenas.create");
  }
  bool retain = false;
  size_t retain_size = sizeof(retain);
  if (mallctl("opt.retain", &retain, &retain_size, nullptr, 0) == 0 && retain) {
    // Someone overrode bx_alloc's retain:false (bemalloc.h): regions can then not be released,
    // but at least jemalloc's blocks stay as small as the pool's regions.
    BX_RETURN_IF_ERROR(SetArenaOption(arena, "retain_grow_limit", options.min_region_bytes));
  }
  // Muzzy pages need purge_lazy, which the hooks refuse: skip that state.
  BX_RETURN_IF_ERROR(SetArenaOption(arena, "muzzy_decay_ms", ssize_t{0}));
  if (options.dirty_decay_ms != -1) {
    BX_RETURN_IF_ERROR(
        SetArenaOption(arena, "dirty_decay_ms", static_cast<ssize_t>(options.dirty_decay_ms)));
  }
  return arena;
}

}  // namespace bx::bemalloc::internal
