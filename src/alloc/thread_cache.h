// Per-thread jemalloc cache (tcache) for the pool arena.
//
// A thread's ordinary tcache must not be used with the pool arena: its bins are shared by all
// arenas, so an ordinary free() would put unregistered memory where the next pool allocation
// finds it. Each thread therefore gets an explicit tcache (tcache.create) that only bemalloc
// touches, and destroys it when the thread exits (its cached blocks go back to the arena). After
// that, calls made from the same thread's later thread-exit destructors use no cache.
//
// Threads: every function acts on the calling thread's cache only.
#pragma once

#include <jemalloc/jemalloc.h>

#include <cstdint>
#include <vector>

namespace bx::bemalloc::internal {

// jemalloc flags (MALLOCX_ARENA | MALLOCX_TCACHE) for the calling thread; 0 until
// InitThreadCaches has run.
inline thread_local int t_mallocx_flags = 0;

// The pool arenas; each new thread is given the next one in turn, as jemalloc spreads threads
// over its automatic arenas, so that threads rarely contend for an arena's bin locks.
void InitThreadCaches(const std::vector<unsigned>& arenas);
// Slow path of ThreadFlags(): creates the calling thread's cache.
int CreateThreadCache();

inline int ThreadFlags() {
  int flags = t_mallocx_flags;
  return __builtin_expect(flags != 0, 1) ? flags : CreateThreadCache();
}

// Returns the calling thread's cached blocks to the arena.
void FlushThreadCache();

// Whether the calling thread is a consumer: more than 3/4 of its last kShareWindow allocations
// and frees were frees (blocks another thread allocated, as an I/O thread frees the responses
// a worker built). A consumer frees past its cache, back to the arena that owns each block,
// where the allocating thread finds it again; cached, the blocks would sit unused.
class FreeShare {
 public:
  static constexpr uint32_t kShareWindow = 1024;
  void Note(bool free) {
    frees_ += free;
    if (++events_ == kShareWindow) {
      consumer_ = frees_ > kShareWindow / 4 * 3;
      events_ = frees_ = 0;
    }
  }
  bool consumer() const { return consumer_; }

 private:
  uint32_t events_ = 0;
  uint32_t frees_ = 0;
  bool consumer_ = false;
};
inline thread_local FreeShare t_free_share;

// jemalloc flags for freeing on the calling thread (after counting the free).
inline int FreeFlags() {
  t_free_share.Note(true);
  return t_free_share.consumer() ? MALLOCX_TCACHE_NONE : ThreadFlags();
}

}  // namespace bx::bemalloc::internal
