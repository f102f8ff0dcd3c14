// Size classes and spans: how bemalloc carves the registered pool.
//
// Every allocation lives in a span: a run of 64 KiB units, 64 KiB-aligned, taken from the
// RegionPool, with a header in its first 128 bytes. So the header of any block is found by
// masking the block's address, with no lookup table (rpmalloc's layout, which the paper built
// bemalloc on). Three kinds:
//   small  up to 32,704 bytes, in one of kClassCount classes; a one-unit span holds many blocks
//          of one class (the classes from 8 KiB up are sized to fill a unit: 7, 6, 5, 4, 3 and
//          2 blocks, so no small block crosses into a second unit);
//   large  up to 2 MiB less the header: one block, a span of 1-32 units of its own;
//   huge   beyond: one block, a span straight from the pool, handed back when freed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace bx::alloc {

inline constexpr int kUnitShift = 16;
inline constexpr size_t kUnitBytes = size_t{1} << kUnitShift;  // 64 KiB
inline constexpr size_t kSpanHeaderBytes = 128;
inline constexpr uint32_t kMaxLargeUnits = 32;
inline constexpr size_t kMaxSmallBytes = 32704;

// 16-128 in steps of 16, four classes per doubling to 8 KiB, then the unit-filling classes.
inline constexpr int kClassCount = 38;
inline constexpr std::array<uint32_t, kClassCount> kClassBytes = {
    16,   32,   48,   64,   80,   96,   112,  128,   160,   192,   224,   256,  320,
    384,  448,  512,  640,  768,  896,  1024, 1280,  1536,  1792,  2048,  2560, 3072,
    3584, 4096, 5120, 6144, 7168, 8176, 9344, 10896, 13072, 16352, 21792, 32704};
static_assert(kClassBytes[kClassCount - 1] == kMaxSmallBytes);
static_assert(2 * kMaxSmallBytes + kSpanHeaderBytes <= kUnitBytes);

namespace size_class_detail {
// Class of every size up to kMaxSmallBytes, in 16-byte steps.
constexpr auto MakeClassOfGranule() {
  std::array<uint8_t, kMaxSmallBytes / 16 + 1> table{};
  int c = 0;
  for (size_t granule = 0; granule < table.size(); ++granule) {
    while (c < kClassCount - 1 && kClassBytes[c] < granule * 16) ++c;
    table[granule] = static_cast<uint8_t>(c);
  }
  return table;
}
inline constexpr auto kClassOfGranule = MakeClassOfGranule();
}  // namespace size_class_detail

// The class of a small size, 1 <= bytes <= kMaxSmallBytes.
inline int ClassOf(size_t bytes) {
  return size_class_detail::kClassOfGranule[(bytes + 15) >> 4];
}

// Blocks of class c in a one-unit span.
inline constexpr uint32_t BlocksPerSpan(int c) {
  return static_cast<uint32_t>((kUnitBytes - kSpanHeaderBytes) / kClassBytes[c]);
}

// Units of the span that holds one block of `bytes` (a large or huge size).
inline constexpr size_t UnitsFor(size_t bytes) {
  return (bytes + kSpanHeaderBytes + kUnitBytes - 1) >> kUnitShift;
}

}  // namespace bx::alloc
