// WireWriter and WireReader: the one encoding of every bexpress wire and file format (rpc frames,
// tcp:// frames and handshake records, the RDMA bootstrap records, parameter-server messages and
// snapshots, the benchmarks' time stamps). Fixed-width unsigned integers and floats, little-endian,
// written one after the other; layouts are documented beside each format.
//
// The writer fills a span whose size the caller computed, or appends to a std::string. A value
// that does not fit the span is not written at all and the writer remembers it (ok()), so an
// encoder with a wrong size computation is caught rather than writing past the end.
//
// The reader treats the bytes as hostile: each Get returns false, and reads nothing, when fewer
// bytes remain than it needs (truncation), so a decoder never reads outside its span and turns a
// false into its own DataLoss Status.
//
// bexpress builds only for little-endian hosts (the static_assert below), where a fixed-width
// value's bytes in memory are its wire bytes: values are copied with memcpy (one load or store
// once compiled), and arrays of them (keys, gradients) in one memcpy. Raw structs that never
// leave the host, or whose layout the NIC defines (src/engine/wire.h: inline payloads with
// static_asserted sizes; the simnic's same-host IPC header), are not encoded through here.
//
// Thread-compatible.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace bx {

static_assert(std::endian::native == std::endian::little,
              "bexpress wire formats are little-endian and copied as the host stores them");

class WireWriter {
 public:
  // Fills `out` from its start.
  explicit WireWriter(std::span<std::byte> out) : fixed_(out) {}
  explicit WireWriter(std::span<uint8_t> out) : fixed_(std::as_writable_bytes(out)) {}
  // Appends to *out (which must outlive the writer).
  explicit WireWriter(std::string* out) : grow_(out) {}

  void PutU8(uint8_t v) { PutValue(v); }
  void PutU16(uint16_t v) { PutValue(v); }
  void PutU32(uint32_t v) { PutValue(v); }
  void PutU64(uint64_t v) { PutValue(v); }
  void PutF32(float v) { PutValue(v); }
  void PutBytes(const void* p, size_t n) {
    std::byte* at = Reserve(n);
    if (at != nullptr && n != 0) std::memcpy(at, p, n);
  }
  void PutZeros(size_t n) {
    std::byte* at = Reserve(n);
    if (at != nullptr && n != 0) std::memset(at, 0, n);
  }
  void PutU64s(std::span<const uint64_t> values) { PutBytes(values.data(), values.size_bytes()); }
  void PutF32s(std::span<const float> values) { PutBytes(values.data(), values.size_bytes()); }

  // Bytes written so far (with a string: by this writer).
  size_t position() const { return position_; }
  // False once a Put did not fit the span (that Put and any later one wrote nothing).
  bool ok() const { return ok_; }

 private:
  template <typename T>
  void PutValue(T v) {
    static_assert(sizeof(T) <= 8);
    std::byte* at = Reserve(sizeof v);
    if (at != nullptr) std::memcpy(at, &v, sizeof v);
  }
  // Where the next n bytes go, or nullptr when they do not fit.
  std::byte* Reserve(size_t n) {
    if (grow_ != nullptr) {
      const size_t at = grow_->size();
      grow_->resize(at + n);
      position_ += n;
      return reinterpret_cast<std::byte*>(grow_->data()) + at;
    }
    if (!ok_ || n > fixed_.size() - position_) {
      ok_ = false;
      return nullptr;
    }
    std::byte* at = fixed_.data() + position_;
    position_ += n;
    return at;
  }

  std::span<std::byte> fixed_;
  std::string* grow_ = nullptr;
  size_t position_ = 0;
  bool ok_ = true;
};

class WireReader {
 public:
  explicit WireReader(std::span<const std::byte> in) : in_(in) {}
  explicit WireReader(std::span<const uint8_t> in) : in_(std::as_bytes(in)) {}

  // Each Get reads the next value into *v and returns true, or, when fewer bytes remain than
  // it needs, returns false and leaves *v and the position as they were.
  bool GetU8(uint8_t* v) { return GetValue(v); }
  bool GetU16(uint16_t* v) { return GetValue(v); }
  bool GetU32(uint32_t* v) { return GetValue(v); }
  bool GetU64(uint64_t* v) { return GetValue(v); }
  bool GetF32(float* v) { return GetValue(v); }
  bool GetBytes(void* p, size_t n) {
    if (n > remaining()) return false;
    if (n != 0) std::memcpy(p, in_.data() + position_, n);
    position_ += n;
    return true;
  }
  bool GetU64s(std::span<uint64_t> values) { return GetBytes(values.data(), values.size_bytes()); }
  bool GetF32s(std::span<float> values) { return GetBytes(values.data(), values.size_bytes()); }
  // A view of the next n bytes, skipped; false (and nothing skipped) when fewer remain.
  bool Take(size_t n, std::span<const std::byte>* view) {
    if (n > remaining()) return false;
    *view = in_.subspan(position_, n);
    position_ += n;
    return true;
  }

  size_t remaining() const { return in_.size() - position_; }
  size_t position() const { return position_; }

 private:
  template <typename T>
  bool GetValue(T* v) {
    return GetBytes(v, sizeof *v);
  }

  std::span<const std::byte> in_;
  size_t position_ = 0;
};

}  // namespace bx
