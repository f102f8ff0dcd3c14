// Buffer: an owning, move-only handle to bemalloc memory — the type the transport hands to
// applications. It holds a pointer, the bytes in use (size) and the bytes allocated (capacity),
// and gives the memory back to bemalloc when destroyed. A Buffer is a plain value: one thread
// uses it at a time, but it may be moved to another thread and destroyed there.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "bx/bemalloc.h"
#include "bx/export.h"
#include "bx/status.h"

namespace bx {

class BX_EXPORT Buffer {
 public:
  Buffer() = default;
  // Allocates `size` bytes from bemalloc (size() == size, capacity() >= size). FailedPrecondition
  // before bx::Init, ResourceExhausted when the pool cannot grow (saying why, e.g. the budget).
  static Result<Buffer> Allocate(size_t size) {
    void* p = bemalloc::Allocate(size);
    if (p == nullptr) {
      if (!bemalloc::IsInitialized()) {
        return FailedPrecondition("bemalloc is not initialised: call bx::Init first");
      }
      const Status why = bemalloc::LastGrowthError();
      if (!why.ok()) {
        return ResourceExhausted(why.message() + " (allocating " + std::to_string(size) +
                                 " bytes)");
      }
      return ResourceExhausted("bemalloc: cannot allocate " + std::to_string(size) + " bytes");
    }
    return Buffer(static_cast<std::byte*>(p), size, bemalloc::UsableSize(p));
  }
  // Takes ownership of `data` (from bemalloc::Allocate, with `capacity` usable bytes).
  static Buffer Adopt(void* data, size_t size, size_t capacity) {
    return Buffer(static_cast<std::byte*>(data), size, capacity);
  }

  Buffer(Buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  explicit operator bool() const { return data_ != nullptr; }

  // Changes the bytes in use without reallocating; `size` must not exceed capacity().
  void Resize(size_t size) {
    assert(size <= capacity_);
    size_ = size;
  }
  // RDMA keys of the region holding the buffer.
  uint32_t lkey() const { return bemalloc::Lkey(data_); }
  uint32_t rkey() const { return bemalloc::Rkey(data_); }

  // Gives up ownership: the caller must bemalloc::Deallocate the pointer.
  std::byte* Release() {
    size_ = capacity_ = 0;
    return std::exchange(data_, nullptr);
  }
  // Frees the memory now; the Buffer becomes empty.
  void Reset() {
    if (data_ != nullptr) bemalloc::Deallocate(std::exchange(data_, nullptr));
    size_ = capacity_ = 0;
  }

 private:
  Buffer(std::byte* data, size_t size, size_t capacity)
      : data_(data), size_(size), capacity_(capacity) {}

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// A buffer in the peer's memory that it described to us out of band (a statically allocated
// tensor, say): Socket::WriteTo's target (bx/transport.h), and where the rdma engine's writes
// land. The peer makes one with RemoteBuffer::Of.
struct RemoteBuffer {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t length = 0;  // bytes from addr a write may cover
  // Describes `buffer` (bemalloc memory, e.g. from Buffer::Allocate) for a peer. The rkey is the
  // registered pool's: it lets the peer write anywhere in this process's bemalloc memory, not
  // only inside `buffer`, so give it only to peers you trust with that (the transport's own
  // rendezvous uses per-buffer memory windows instead; RdmaOptions::scoped_remote_writes).
  static RemoteBuffer Of(const Buffer& buffer) {
    return RemoteBuffer{reinterpret_cast<uint64_t>(buffer.data()), buffer.rkey(), buffer.size()};
  }
};

}  // namespace bx
