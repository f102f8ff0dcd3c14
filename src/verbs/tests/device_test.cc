// Device and ListDevices on the simnic, and the GID format.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "verbs/tests/test_support.h"
#include "verbs/verbs.h"

namespace bx::verbs {
namespace {

using testing::ScopedEnv;

std::unique_ptr<Library> LoadSim() {
  auto lib = Library::Load("sim");
  EXPECT_TRUE(lib.ok()) << lib.status().ToString();
  return lib.ok() ? std::move(lib).value() : nullptr;
}

TEST(FormatGidTest, PrintsEightGroupsOfFourHexDigits) {
  union ibv_gid gid {};
  gid.raw[0] = 0xfe;
  gid.raw[1] = 0x80;
  gid.raw[15] = 0x01;
  EXPECT_EQ(FormatGid(gid), "fe80:0000:0000:0000:0000:0000:0000:0001");
}

TEST(DeviceTest, UnknownNameListsTheDevicesThatExist) {
  BX_REQUIRE_SIMNIC();
  auto lib = LoadSim();
  ASSERT_NE(lib, nullptr);
  auto device = Device::Open(*lib, "nope");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kNotFound);
  EXPECT_NE(device.status().message().find("'nope'"), std::string::npos);
  EXPECT_NE(device.status().message().find("bxsim0"), std::string::npos)
      << device.status().ToString();
  EXPECT_NE(device.status().message().find("bxsim1"), std::string::npos)
      << device.status().ToString();
}

TEST(DeviceTest, OpensTheFirstDeviceWithAPdAndAnActivePort) {
  BX_REQUIRE_SIMNIC();
  auto lib = LoadSim();
  ASSERT_NE(lib, nullptr);
  auto device = Device::Open(*lib, "");
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ(device->name(), "bxsim0");
  EXPECT_NE(device->context(), nullptr);
  EXPECT_NE(device->pd(), nullptr);
  EXPECT_GT(device->attr().max_qp, 0);
  EXPECT_EQ(device->port(1).state, IBV_PORT_ACTIVE);
  union ibv_gid zero {};
  union ibv_gid gid = device->gid(1, 0);
  EXPECT_NE(std::memcmp(&gid, &zero, sizeof(gid)), 0) << "GID 0 of port 1 is all zero";
  EXPECT_EQ(&device->lib(), lib.get());
}

TEST(DeviceTest, TwoDevicesHaveDifferentGids) {
  BX_REQUIRE_SIMNIC();
  auto lib = LoadSim();
  ASSERT_NE(lib, nullptr);
  auto a = Device::Open(*lib, "bxsim0");
  auto b = Device::Open(*lib, "bxsim1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(FormatGid(a->gid()), FormatGid(b->gid()));
}

TEST(DeviceTest, MovingTransfersOwnership) {
  BX_REQUIRE_SIMNIC();
  auto lib = LoadSim();
  ASSERT_NE(lib, nullptr);
  auto opened = Device::Open(*lib, "bxsim1");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Device device = std::move(opened).value();
  ibv_context* context = device.context();
  Device moved = std::move(device);
  EXPECT_EQ(moved.context(), context);
  EXPECT_EQ(moved.name(), "bxsim1");
  EXPECT_EQ(device.context(), nullptr);  // NOLINT(bugprone-use-after-move): checking the move
  moved = Device::Open(*lib, "bxsim0").value();
  EXPECT_EQ(moved.name(), "bxsim0");
}

TEST(DeviceTest, BxDeviceNamesTheDefaultDevice) {
  BX_REQUIRE_SIMNIC();
  ScopedEnv device_env("BX_DEVICE", "bxsim1");
  // Open() without a library goes through ForDevice, which picks the simnic for a bxsim name.
  auto device = Device::Open();
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  EXPECT_EQ(device->name(), "bxsim1");
  EXPECT_TRUE(device->lib().is_sim());
}

TEST(DeviceTest, QueryPortAndRegMrWorkThroughTheLoader) {
  BX_REQUIRE_SIMNIC();
  auto lib = LoadSim();
  ASSERT_NE(lib, nullptr);
  auto device = Device::Open(*lib, "bxsim0");
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  ibv_port_attr port{};
  ASSERT_EQ(lib->QueryPort(device->context(), 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  std::vector<char> buffer(8192);
  ibv_mr* mr = lib->RegMr(device->pd(), buffer.data(), buffer.size(),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  EXPECT_EQ(mr->length, buffer.size());
  if (lib->sim().is_registered != nullptr) {
    EXPECT_EQ(
        lib->sim().is_registered(device->pd(), buffer.data() + 100, 100, IBV_ACCESS_REMOTE_WRITE),
        1);
  }
  EXPECT_EQ(lib->dereg_mr(mr), 0);
}

}  // namespace
}  // namespace bx::verbs
