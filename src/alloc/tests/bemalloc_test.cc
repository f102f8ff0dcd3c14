// The process-wide pool, from one thread.
#include "bx/bemalloc.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "alloc/tests/fake_registrar.h"
#include "alloc/tests/test_backend.h"

namespace bx::bemalloc {
namespace {

using testing::NicHasRegistered;
constexpr size_t kMiB = size_t{1} << 20;

// Every size class boundary from 1 byte to 64 MiB, and its neighbours.
std::vector<size_t> InterestingSizes() {
  std::vector<size_t> sizes;
  for (size_t n = 1; n <= 64 * kMiB; n *= 2) {
    for (size_t s : {n - 1, n, n + 1, n + n / 2}) {
      if (s >= 1 && s <= 64 * kMiB) sizes.push_back(s);
    }
  }
  return sizes;
}

TEST(BemallocTest, EverySizeFromOneByteTo64MiBIsRegistered) {
  for (size_t size : InterestingSizes()) {
    auto* p = static_cast<char*>(Allocate(size));
    ASSERT_NE(p, nullptr) << size;
    const MemoryRegion* region = GetMR(p);
    ASSERT_NE(region, nullptr) << size;
    EXPECT_TRUE(region->Contains(p, size)) << size;
    EXPECT_TRUE(NicHasRegistered(p, size)) << size;
    EXPECT_GE(UsableSize(p), size);
    p[0] = 1;
    p[size - 1] = 2;
    Deallocate(p);
  }
}

TEST(BemallocTest, ZeroBytesGivesAUsablePointer) {
  void* p = Allocate(0);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(GetMR(p), nullptr);
  Deallocate(p);
}

TEST(BemallocTest, GetMRFindsTheRegionFromInteriorPointers) {
  const size_t size = 3 * kMiB + 17;
  auto* p = static_cast<char*>(Allocate(size));
  ASSERT_NE(p, nullptr);
  const MemoryRegion* region = GetMR(p);
  ASSERT_NE(region, nullptr);
  for (size_t offset : {size_t{1}, size_t{4095}, kMiB, 2 * kMiB + 1, size - 1}) {
    EXPECT_EQ(GetMR(p + offset), region) << offset;
    EXPECT_EQ(Lkey(p + offset), region->lkey);
    EXPECT_EQ(Rkey(p + offset), region->rkey);
  }
  EXPECT_NE(region->handle, nullptr);
  Deallocate(p);
}

TEST(BemallocTest, ForeignPointersHaveNoRegion) {
  auto heap = std::make_unique<char[]>(64);
  int stack = 0;
  EXPECT_EQ(GetMR(heap.get()), nullptr);
  EXPECT_EQ(GetMR(&stack), nullptr);
  EXPECT_EQ(Lkey(heap.get()), 0u);
  EXPECT_EQ(Rkey(&stack), 0u);
  EXPECT_FALSE(NicHasRegistered(heap.get(), 64));  // the checker itself is not vacuous
}

#ifndef NDEBUG
TEST(BemallocDeathTest, DebugBuildRejectsForeignPointer) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int stack = 0;
  EXPECT_DEATH(Deallocate(&stack), "not allocated by bemalloc");
}
#endif

TEST(BemallocTest, InitTwiceFails) {
  Status status = Init(std::make_unique<testing::FakeRegistrar>());
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
}

TEST(BemallocTest, EmptyRegionsAreReleasedByTrim) {
  Trim();
  const Counters before = GetCounters();
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(Allocate(16 * kMiB));
  for (int i = 0; i < 2000; ++i) blocks.push_back(Allocate(64 + i));
  const Counters grown = GetCounters();
  EXPECT_GE(grown.registered_bytes, before.registered_bytes + 128 * kMiB);
  void* released = blocks[0];
  ASSERT_TRUE(NicHasRegistered(released, 16 * kMiB));
  for (void* p : blocks) Deallocate(p);

  Trim();
  EXPECT_FALSE(NicHasRegistered(released, 1));  // the NIC no longer has the region
  const Counters trimmed = GetCounters();
  EXPECT_GT(trimmed.deregistrations, before.deregistrations);
  EXPECT_EQ(trimmed.empty_region_bytes, 0u);
  // Everything allocated here was released; what jemalloc still holds from before may remain.
  EXPECT_LE(trimmed.registered_bytes, before.registered_bytes + 8 * kMiB);
}

TEST(BemallocTest, RegistrationsStopInSteadyState) {
  // The same allocation pattern, over and over: after the first round has grown the pool to
  // the pattern's high-water mark, later rounds must be served from registered memory.
  auto round = [] {
    std::vector<void*> live;
    uint64_t x = 12345;
    for (int i = 0; i < 4000; ++i) {
      x = x * 6364136223846793005u + 1442695040888963407u;
      size_t size =
          (x >> 33) % 4 == 0 ? 64 * 1024 + (x >> 40) % (960 * 1024) : 16 + (x >> 40) % 16384;
      live.push_back(Allocate(size));
      if (live.size() > 256) {
        Deallocate(live[(x >> 20) % live.size()]);
        live[(x >> 20) % live.size()] = live.back();
        live.pop_back();
      }
    }
    for (void* p : live) Deallocate(p);
  };
  round();
  round();
  const uint64_t registrations = GetCounters().registrations;
  for (int i = 0; i < 5; ++i) round();
  EXPECT_EQ(GetCounters().registrations, registrations);
}

}  // namespace
}  // namespace bx::bemalloc
