// RegionPool on its own (not the process-wide pool), with a FakeRegistrar.
#include "alloc/region_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "alloc/tests/fake_registrar.h"

namespace bx::alloc {
namespace {

using bx::bemalloc::testing::FakeRegistrar;
constexpr size_t kMiB = size_t{1} << 20;

class RegionPoolTest : public ::testing::Test {
 protected:
  explicit RegionPoolTest(size_t keep_empty_bytes = 0) {
    auto registrar = std::make_unique<FakeRegistrar>();
    fake_ = registrar.get();
    pool_ = std::make_unique<RegionPool>(std::move(registrar), kSlotBytes, keep_empty_bytes);
  }
  void* Take(size_t size, size_t alignment = 4096) {
    bool zeroed = false;
    return pool_->Take(size, alignment, &zeroed);
  }

  FakeRegistrar* fake_;
  std::unique_ptr<RegionPool> pool_;
};

TEST_F(RegionPoolTest, NewRegionIsTwoMebibyteAlignedAndRegistered) {
  bool zeroed = false;
  void* p = pool_->Take(3 * kMiB, 4096, &zeroed);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(zeroed);
  const MemoryRegion* region = pool_->Find(p);
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(region->base) % kSlotBytes, 0u);
  EXPECT_EQ(region->length, 4 * kMiB);
  EXPECT_TRUE(fake_->IsRegistered(p, 3 * kMiB));
  EXPECT_EQ(pool_->counters().registrations, 1u);
  EXPECT_EQ(pool_->counters().registered_bytes, 4 * kMiB);
}

TEST_F(RegionPoolTest, ReusesFreeRangesBeforeRegisteringAgain) {
  void* a = Take(kMiB);
  void* b = Take(kMiB);  // the rest of the first 2 MiB region
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(pool_->Find(a), pool_->Find(b));
  pool_->Give(a, kMiB);
  void* c = Take(kMiB);
  EXPECT_EQ(c, a);
  EXPECT_EQ(pool_->counters().registrations, 1u);
}

TEST_F(RegionPoolTest, HonoursAlignment) {
  void* a = Take(4096);
  void* b = Take(64 * 1024, 64 * 1024);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % (64 * 1024), 0u);
  EXPECT_EQ(pool_->Find(a), pool_->Find(b));
}

TEST_F(RegionPoolTest, EmptyRegionIsReleasedOnceEveryRangeIsBack) {
  void* a = Take(kMiB);
  void* b = Take(kMiB);
  pool_->Give(b, kMiB);
  EXPECT_EQ(pool_->counters().regions, 1u);  // a still holds it
  pool_->Give(a, kMiB);                      // coalesces into the whole region
  Counters c = pool_->counters();
  EXPECT_EQ(c.regions, 0u);
  EXPECT_EQ(c.registered_bytes, 0u);
  EXPECT_EQ(c.deregistrations, 1u);
  EXPECT_EQ(pool_->Find(a), nullptr);
  EXPECT_FALSE(fake_->IsRegistered(a, 1));
}

TEST_F(RegionPoolTest, RegistrationFailureReturnsNullAndIsCounted) {
  fake_->FailNextRegistration();
  EXPECT_EQ(Take(kMiB), nullptr);
  EXPECT_EQ(pool_->counters().registration_failures, 1u);
  EXPECT_FALSE(pool_->last_error().ok());
  EXPECT_NE(Take(kMiB), nullptr);  // the next attempt registers
}

class RegionPoolKeepTest : public RegionPoolTest {
 protected:
  RegionPoolKeepTest() : RegionPoolTest(/*keep_empty_bytes=*/4 * kMiB) {}
};

TEST_F(RegionPoolKeepTest, KeepsEmptyRegionsUpToTheBudget) {
  void* big[3];
  for (void*& p : big) p = Take(4 * kMiB);
  for (void* p : big) pool_->Give(p, 4 * kMiB);
  Counters c = pool_->counters();
  EXPECT_EQ(c.regions, 1u);  // one 4 MiB region kept for reuse
  EXPECT_EQ(c.empty_region_bytes, 4 * kMiB);
  EXPECT_EQ(c.deregistrations, 2u);

  EXPECT_NE(Take(4 * kMiB), nullptr);  // served by the kept region: no registration
  EXPECT_EQ(pool_->counters().registrations, 3u);

  pool_->ReleaseEmpty(0);
  EXPECT_EQ(pool_->counters().regions, 1u);  // not empty any more
}

}  // namespace
}  // namespace bx::alloc

namespace bx::alloc {
namespace {

// The registered-memory budget: held ranges fill it, the next region is refused at once with
// an error that names the budget, and memory given back is taken again within it; empty
// regions kept for reuse are released to make room for a region of another size.
TEST(RegionPoolBudgetTest, ARegionBeyondTheBudgetIsRefusedAndFreedMemoryIsTakenAgain) {
  auto registrar = std::make_unique<FakeRegistrar>();
  RegionPool pool(std::move(registrar), kSlotBytes, /*keep_empty_bytes=*/64 * kMiB,
                  /*max_registered_bytes=*/8 * kMiB);
  bool zeroed = false;
  std::vector<void*> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(pool.Take(2 * kMiB, 4096, &zeroed));
    ASSERT_NE(held.back(), nullptr) << i;
  }
  EXPECT_EQ(pool.Take(2 * kMiB, 4096, &zeroed), nullptr);
  EXPECT_EQ(pool.last_error().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(pool.last_error().message().find("budget"), std::string::npos)
      << pool.last_error().ToString();
  EXPECT_EQ(pool.counters().budget_refusals, 1u);
  EXPECT_EQ(pool.counters().registered_bytes, 8 * kMiB);

  pool.Give(held.back(), 2 * kMiB);  // its region is empty now, kept for reuse
  held.pop_back();
  void* again = pool.Take(2 * kMiB, 4096, &zeroed);
  EXPECT_NE(again, nullptr) << "memory given back is taken again within the budget";
  EXPECT_TRUE(pool.last_error().ok());

  // Two empty 2 MiB regions do not hold a 4 MiB request: they are released for a new region.
  pool.Give(again, 2 * kMiB);
  pool.Give(held.back(), 2 * kMiB);
  held.pop_back();
  EXPECT_EQ(pool.counters().empty_region_bytes, 4 * kMiB);
  void* big = pool.Take(4 * kMiB, 4096, &zeroed);
  ASSERT_NE(big, nullptr) << pool.last_error().ToString();
  EXPECT_EQ(pool.counters().registered_bytes, 8 * kMiB);
  EXPECT_EQ(pool.counters().budget_refusals, 1u);
}

TEST(RegionPoolBudgetTest, NoBudgetByDefault) {
  RegionPool pool(std::make_unique<FakeRegistrar>(), kSlotBytes, 0);
  bool zeroed = false;
  for (int i = 0; i < 16; ++i) ASSERT_NE(pool.Take(2 * kMiB, 4096, &zeroed), nullptr) << i;
  EXPECT_EQ(pool.counters().budget_refusals, 0u);
}

}  // namespace
}  // namespace bx::alloc
