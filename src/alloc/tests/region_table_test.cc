#include "alloc/region_table.h"

#include <gtest/gtest.h>

#include <memory>

namespace bx::alloc {
namespace {

void* At(uintptr_t address) {
  return reinterpret_cast<void*>(address);
}

TEST(RegionTableTest, FindsEverySlotOfARegionAndNothingOutside) {
  auto table = std::make_unique<RegionTable>();
  const uintptr_t base = uintptr_t{0x7f1200000000};
  MemoryRegion region{At(base), 3 * kSlotBytes, 1, 2, nullptr};
  ASSERT_TRUE(table->Set(&region));

  EXPECT_EQ(table->Find(At(base)), &region);
  EXPECT_EQ(table->Find(At(base + kSlotBytes + 12345)), &region);
  EXPECT_EQ(table->Find(At(base + 3 * kSlotBytes - 1)), &region);
  EXPECT_EQ(table->Find(At(base - 1)), nullptr);
  EXPECT_EQ(table->Find(At(base + 3 * kSlotBytes)), nullptr);

  table->Clear(&region);
  EXPECT_EQ(table->Find(At(base + 5)), nullptr);
}

TEST(RegionTableTest, RejectsAddressesBeyondUserSpace) {
  auto table = std::make_unique<RegionTable>();
  EXPECT_EQ(table->Find(At(~uintptr_t{0})), nullptr);
  MemoryRegion region{At(uintptr_t{1} << 50), kSlotBytes, 0, 0, nullptr};
  EXPECT_FALSE(table->Set(&region));
}

}  // namespace
}  // namespace bx::alloc
