// Library::Load: which verbs library each BX_VERBS mode picks, and how failures read.
#include <gtest/gtest.h>

#include "verbs/device_list.h"
#include "verbs/tests/test_support.h"
#include "verbs/verbs.h"

namespace bx::verbs {
namespace {

using testing::ScopedEnv;

TEST(LibraryTest, BackendNames) {
  EXPECT_EQ(BackendName(Backend::kSystem), "system");
  EXPECT_EQ(BackendName(Backend::kSim), "sim");
}

TEST(LibraryTest, UnknownModeIsInvalidArgument) {
  auto lib = Library::Load("bogus");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lib.status().message().find("BX_VERBS=bogus"), std::string::npos)
      << lib.status().ToString();
}

TEST(LibraryTest, SystemModeLoadsLibibverbsWithEveryRequiredEntryPoint) {
  auto lib = Library::Load("system");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ(lib.value()->backend(), Backend::kSystem);
  EXPECT_FALSE(lib.value()->is_sim());
  EXPECT_NE(lib.value()->path().find("libibverbs"), std::string::npos) << lib.value()->path();
  EXPECT_NE(lib.value()->get_device_list, nullptr);
  EXPECT_NE(lib.value()->query_port_compat, nullptr);
  EXPECT_NE(lib.value()->reg_mr_iova2, nullptr);  // rdma-core >= 29 has IBVERBS_1.8
  EXPECT_STREQ(lib.value()->wc_status_str(IBV_WC_SUCCESS), "success");
  // No simnic extension on hardware.
  EXPECT_EQ(lib.value()->sim().query_counters, nullptr);
  EXPECT_EQ(lib.value()->sim().force_qp_error, nullptr);
}

TEST(LibraryTest, SystemModeWithoutRdmaReportsNoDevices) {
  if (testing::SystemHasDevices()) GTEST_SKIP() << "this machine has RDMA devices";
  auto lib = Library::Load("system");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  auto devices = ListDevices(*lib.value());
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(devices.status().message().find("no RDMA devices"), std::string::npos)
      << devices.status().ToString();
  auto device = Device::Open(*lib.value(), "");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable) << device.status().ToString();
}

TEST(LibraryTest, ExplicitSimnicPathThatIsNotASimnicNamesMissingSymbols) {
  ScopedEnv simnic("BX_SIMNIC_LIB", "libc.so.6");
  auto lib = Library::Load("sim");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("does not export ibv_get_device_list"), std::string::npos)
      << lib.status().ToString();
}

TEST(LibraryTest, ExplicitSimnicPathThatDoesNotExistNamesPathAndDlerror) {
  ScopedEnv simnic("BX_SIMNIC_LIB", "/nonexistent/libbx_simnic.so");
  auto lib = Library::Load("sim");
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.status().message().find("/nonexistent/libbx_simnic.so"), std::string::npos);
  EXPECT_NE(lib.status().message().find("No such file"), std::string::npos)
      << lib.status().ToString();
}

TEST(LibraryTest, AutoWithNothingUsableNamesBothBackends) {
  if (testing::SystemHasDevices()) GTEST_SKIP() << "this machine has RDMA devices";
  ScopedEnv simnic("BX_SIMNIC_LIB", "/nonexistent/libbx_simnic.so");
  auto lib = Library::Load("auto");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  const std::string& message = lib.status().message();
  EXPECT_NE(message.find("system: no RDMA devices"), std::string::npos) << message;
  EXPECT_NE(message.find("/nonexistent/libbx_simnic.so"), std::string::npos) << message;
}

TEST(LibraryTest, SimModeLoadsTheSimnicWithItsExtensions) {
  BX_REQUIRE_SIMNIC();
  ScopedEnv simnic("BX_SIMNIC_LIB", std::nullopt);
  auto lib = Library::Load("sim");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_TRUE(lib.value()->is_sim());
  EXPECT_NE(lib.value()->path().find("libbx_simnic.so"), std::string::npos) << lib.value()->path();
  EXPECT_NE(lib.value()->sim().query_counters, nullptr);
  EXPECT_NE(lib.value()->sim().hardware_cpu_ns, nullptr);
  auto devices = ListDevices(*lib.value());
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_GE(devices->size(), 2u);
  EXPECT_EQ(devices.value()[0].name, "bxsim0");
  EXPECT_EQ(devices.value()[0].kind, "sim");
  EXPECT_GT(devices.value()[0].max_qp, 0u);
}

TEST(LibraryTest, AutoPicksTheSimnicWhenTheSystemHasNoDevices) {
  BX_REQUIRE_SIMNIC();
  if (testing::SystemHasDevices()) GTEST_SKIP() << "this machine has RDMA devices";
  ScopedEnv simnic("BX_SIMNIC_LIB", std::nullopt);
  auto lib = Library::Load("auto");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ(lib.value()->backend(), Backend::kSim);
  auto empty_mode = Library::Load("");
  ASSERT_TRUE(empty_mode.ok()) << empty_mode.status().ToString();
  EXPECT_EQ(empty_mode.value()->backend(), Backend::kSim);
}

TEST(LibraryTest, AutoPicksTheSimnicForABxsimDeviceName) {
  BX_REQUIRE_SIMNIC();
  ScopedEnv simnic("BX_SIMNIC_LIB", std::nullopt);
  auto lib = Library::Load("auto", "bxsim1");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ(lib.value()->backend(), Backend::kSim);
}

TEST(LibraryTest, ProcessLibraryFollowsTheEnvironment) {
  BX_REQUIRE_SIMNIC();
  // Get() reads the environment once per process; set it before the first call. When another
  // test in this process already called Get(), only check that it is consistent.
  ScopedEnv mode("BX_VERBS", "sim");
  ScopedEnv simnic("BX_SIMNIC_LIB", std::nullopt);
  auto lib = Library::Get();
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ(lib.value(), Library::Get().value());
  auto sim = Library::ForBackend(Backend::kSim);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_EQ(sim.value(), Library::ForBackend(Backend::kSim).value());
  EXPECT_EQ(Library::ForDevice("bxsim0").value()->backend(), Backend::kSim);
}

}  // namespace
}  // namespace bx::verbs
