// An allocator for the simulator's large arrays (the endpoints: 22 MB at paper scale, read at
// random): 2 MB aligned and advised as huge pages, so that a random access costs a cache miss but
// not also a TLB miss (with 4 KB pages the endpoints alone span 5,600 pages). Where transparent
// huge pages are off, it is a plain aligned allocation.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace bx::sim {

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>& /*other*/) {}

  T* allocate(size_t n) {
    size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return static_cast<T*>(::operator new(bytes));
    bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, bytes);
    if (p == nullptr) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);  // advice only: no huge pages is still correct
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugePage) {
      ::operator delete(p);
    } else {
      std::free(p);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>& /*other*/) const {
    return true;
  }

 private:
  static constexpr size_t kHugePage = size_t(2) << 20;
};

}  // namespace bx::sim
