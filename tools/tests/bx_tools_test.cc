// The plain functions behind bx's output (issue 52): the demo table's comparison labels.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "demo_format.h"

namespace bx::tools {
namespace {

TEST(DemoFormatTest, AFallInRequestsPerSecondIsALoss) {
  // The demo printed "-26.2% (gain)" for RDMA 738 against TCP 1000 requests/s.
  EXPECT_EQ(Gain(738, 1000), "-26.2% (loss)");
  EXPECT_EQ(Gain(1250, 1000), "+25.0% (gain)");
  EXPECT_EQ(Gain(1000, 1000), "+0.0%");
  EXPECT_EQ(Gain(999.9999, 1000), "+0.0%");
  EXPECT_EQ(Gain(5, 0), "n/a");
}

TEST(DemoFormatTest, AReductionIsPositiveWhenRdmaIsLower) {
  EXPECT_EQ(Reduction(75, 100), "+25.0%");
  EXPECT_EQ(Reduction(130, 100), "-30.0%");
  EXPECT_EQ(Reduction(1, 0), "n/a");
}

}  // namespace
}  // namespace bx::tools
