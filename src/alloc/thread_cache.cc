#include "alloc/thread_cache.h"

#include <jemalloc/jemalloc.h>

#include <atomic>

namespace bx::bemalloc::internal {
namespace {

// MALLOCX_ARENA(pool arena i) for each pool arena; set once before g_arena_count.
constexpr size_t kMaxArenas = 64;
int g_arena_flags[kMaxArenas];
std::atomic<size_t> g_arena_count{0};
std::atomic<size_t> g_next_arena{0};
thread_local int t_arena_flags = 0;

constexpr unsigned kNoCache = ~0u;
thread_local unsigned t_cache_id = kNoCache;

// Destroys the thread's cache at thread exit. Only constructed (and so only registered for
// destruction) on the slow path, so the fast path pays no thread_local guard.
struct ThreadCacheReaper {
  bool armed = false;
  ~ThreadCacheReaper() {
    if (t_cache_id != kNoCache) {
      unsigned id = t_cache_id;
      mallctl("tcache.destroy", nullptr, nullptr, &id, sizeof(id));
      t_cache_id = kNoCache;
    }
    t_mallocx_flags = t_arena_flags | MALLOCX_TCACHE_NONE;
  }
};
thread_local ThreadCacheReaper t_reaper;

}  // namespace

void InitThreadCaches(const std::vector<unsigned>& arenas) {
  size_t count = arenas.size() < kMaxArenas ? arenas.size() : kMaxArenas;
  for (size_t i = 0; i < count; ++i) g_arena_flags[i] = MALLOCX_ARENA(arenas[i]);
  g_arena_count.store(count, std::memory_order_release);
}

int CreateThreadCache() {
  size_t count = g_arena_count.load(std::memory_order_acquire);
  if (count == 0) return 0;
  int arena_flags = g_arena_flags[g_next_arena.fetch_add(1, std::memory_order_relaxed) % count];
  t_arena_flags = arena_flags;
  unsigned id = 0;
  size_t id_size = sizeof(id);
  if (mallctl("tcache.create", &id, &id_size, nullptr, 0) != 0) {
    // jemalloc has a fixed number of explicit caches; this thread goes without one.
    t_mallocx_flags = arena_flags | MALLOCX_TCACHE_NONE;
    return t_mallocx_flags;
  }
  t_cache_id = id;
  t_reaper.armed = true;  // constructs the reaper, which registers its destructor
  t_mallocx_flags = arena_flags | MALLOCX_TCACHE(id);
  return t_mallocx_flags;
}

void FlushThreadCache() {
  if (t_cache_id == kNoCache) return;
  unsigned id = t_cache_id;
  mallctl("tcache.flush", nullptr, nullptr, &id, sizeof(id));
}

}  // namespace bx::bemalloc::internal
