// RunSelfCheck: the `bx selfcheck` body, on the simnic.
#include <gtest/gtest.h>

#include "verbs/selfcheck.h"
#include "verbs/tests/test_support.h"

namespace bx::verbs {
namespace {

TEST(SelfCheckTest, EveryCheckPassesOnTheSimnic) {
  BX_REQUIRE_SIMNIC();
  auto lib = Library::Load("sim");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  SelfCheckReport report = RunSelfCheck(**lib);
  for (const CheckResult& check : report.checks) {
    EXPECT_TRUE(check.passed) << check.name << ": " << check.detail;
  }
  EXPECT_EQ(report.failed(), 0);
  EXPECT_EQ(report.passed(), 8);  // open x2, register, connect, 4 operations
  EXPECT_EQ(report.backend, "sim");
}

TEST(SelfCheckTest, AMissingDeviceIsAFailedCheckNotACrash) {
  BX_REQUIRE_SIMNIC();
  auto lib = Library::Load("sim");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  SelfCheckOptions options;
  options.device_b = "nope";
  SelfCheckReport report = RunSelfCheck(**lib, options);
  ASSERT_EQ(report.checks.size(), 2u);
  EXPECT_TRUE(report.checks[0].passed);
  EXPECT_FALSE(report.checks[1].passed);
  EXPECT_EQ(report.checks[1].name, "open nope");
  EXPECT_EQ(report.failed(), 1);
}

TEST(SelfCheckTest, TheSystemBackendWithoutDevicesFailsCleanly) {
  if (testing::SystemHasDevices()) GTEST_SKIP() << "this machine has RDMA devices";
  auto lib = Library::Load("system");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  SelfCheckReport report = RunSelfCheck(**lib);
  ASSERT_EQ(report.checks.size(), 1u);
  EXPECT_FALSE(report.checks[0].passed);
  EXPECT_NE(report.checks[0].detail.find("no RDMA devices"), std::string::npos)
      << report.checks[0].detail;
}

}  // namespace
}  // namespace bx::verbs
