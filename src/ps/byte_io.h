// Little-endian byte writer and bounds-checked reader shared by the wire codecs and the
// snapshot format. The reader never reads past its span: each Read* returns false once the
// bytes run out, and the caller turns that into a DataLoss Status. Thread-compatible.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace bx::ps {

// The formats are little-endian and the codecs copy native integers: refuse to build elsewhere
// rather than silently produce a different format.
static_assert(std::endian::native == std::endian::little, "bx::ps formats assume little-endian");

class ByteWriter {
 public:
  explicit ByteWriter(std::span<std::byte> out) : out_(out) {}

  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    PutBytes(&v, sizeof v);
  }
  void PutBytes(const void* p, size_t n) {
    if (n == 0) return;
    std::memcpy(out_.data() + pos_, p, n);
    pos_ += n;
  }
  size_t position() const { return pos_; }

 private:
  std::span<std::byte> out_;
  size_t pos_ = 0;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}

  template <typename T>
  bool Get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return GetBytes(v, sizeof *v);
  }
  bool GetBytes(void* p, size_t n) {
    if (n > remaining()) return false;
    if (n != 0) std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  // Returns a view of the next n bytes and skips them, or an empty span if fewer remain
  // (check with remaining() first when n may be 0).
  std::span<const std::byte> Take(size_t n) {
    if (n > remaining()) return {};
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  std::span<const std::byte> in_;
  size_t pos_ = 0;
};

}  // namespace bx::ps
