// Dynamic-threshold PFC against hand-computed occupancies.
#include "sim/switch_mmu.h"

#include <gtest/gtest.h>

namespace bx::sim {
namespace {

// Buffer 1,000,000 B, 3 ports with 10,000 B headroom each, reserve 4096 B, alpha 1/8:
// the pool left for sharing is 1,000,000 - 30,000 - 3 x 4096 = 957,712 B and
// threshold = (957,712 - shared used) >> 3.
SwitchMmu SmallSwitch() {
  FabricConfig config;
  config.buffer_bytes = 1000000;
  return SwitchMmu(config, {10000, 10000, 10000});
}

constexpr uint32_t kCell = 4160;  // 4096 payload + 64 header

TEST(SwitchMmu, ThresholdFollowsFreeSharedBuffer) {
  SwitchMmu mmu = SmallSwitch();
  EXPECT_EQ(mmu.Threshold(), 957712 >> 3);
  mmu.Admit(0, kCell);  // 4096 in reserve, 64 shared
  EXPECT_EQ(mmu.SharedUsed(0), 64u);
  EXPECT_EQ(mmu.Threshold(), (957712 - 64) >> 3);
}

TEST(SwitchMmu, XoffThenXonAtComputedOccupancies) {
  SwitchMmu mmu = SmallSwitch();
  // After k cells: shared = k x 4160 - 4096. At k = 26: 104,064 < (957,712 - 104,064) >> 3 =
  // 106,706, no pause. Cell 27 would bring shared to 108,224 > 106,706: it goes to headroom,
  // and headroom in use means XOFF.
  for (int k = 1; k <= 26; ++k) {
    mmu.Admit(0, kCell);
    ASSERT_FALSE(mmu.ShouldPause(0)) << k;
  }
  EXPECT_EQ(mmu.SharedUsed(0), 104064u);
  mmu.Admit(0, kCell);
  EXPECT_EQ(mmu.headroom_bytes(0), kCell);
  EXPECT_EQ(mmu.SharedUsed(0), 104064u);
  ASSERT_TRUE(mmu.ShouldPause(0));
  mmu.SetPaused(0, true);
  EXPECT_EQ(mmu.occupancy(), 27u * kCell);

  // First departure empties the headroom; 104,064 + 3,072 = 107,136 > 106,706: still paused.
  mmu.Release(0, kCell);
  EXPECT_EQ(mmu.headroom_bytes(0), 0u);
  EXPECT_FALSE(mmu.ShouldResume(0));
  // Second: shared 99,904; threshold (957,712 - 99,904) >> 3 = 107,226 >= 102,976: XON, with
  // 25 cells = 104,000 B queued.
  mmu.Release(0, kCell);
  EXPECT_EQ(mmu.SharedUsed(0), 99904u);
  EXPECT_EQ(mmu.Threshold(), 107226);
  EXPECT_TRUE(mmu.ShouldResume(0));
  EXPECT_EQ(mmu.occupancy(), 104000u);
}

TEST(SwitchMmu, OtherPortsShrinkTheThreshold) {
  SwitchMmu mmu = SmallSwitch();
  for (int k = 0; k < 20; ++k) mmu.Admit(1, kCell);
  // Port 1's shared use (20 x 4160 - 4096 = 79,104) lowers everyone's threshold.
  EXPECT_EQ(mmu.Threshold(), (957712 - 79104) >> 3);
  EXPECT_FALSE(mmu.ShouldPause(0));
}

TEST(SwitchMmu, LossyAdmissionUsesFreeBuffer) {
  SwitchMmu mmu = SmallSwitch();
  EXPECT_TRUE(mmu.AdmitLossy(0, kCell));
  EXPECT_TRUE(mmu.AdmitLossy(1000000 / 8 - kCell, kCell));
  EXPECT_FALSE(mmu.AdmitLossy(1000000 / 8, kCell));
}

}  // namespace
}  // namespace bx::sim
