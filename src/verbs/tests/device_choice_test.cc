// Device and port choice by locality (verbs/device_choice.h) on a dual-NUMA simnic. main() gives
// this process, before the simnic loads, three devices: bxsim0 on node 0; bxsim1 on node 1, a
// dual-port NIC cabled on port 2 only (roce2); bxsim2 on node 1. BX_TEST_CPU_NODES stands in for
// a two-node host: CPU 0 on node 0, CPU 1 on node 1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "base/cpu_nodes.h"
#include "verbs/device_choice.h"
#include "verbs/port_address.h"

namespace bx::verbs {
namespace {

Library& Sim() {
  static Library* lib = [] {
    auto loaded = Library::Load("sim");
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? loaded->release() : nullptr;
  }();
  return *lib;
}

class DeviceChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("BX_TEST_CPU_NODES", "0:0;1:1", 1); }
  void TearDown() override { unsetenv("BX_TEST_CPU_NODES"); }

  DeviceChoice Choose(const char* request, std::vector<int> cpus, int threads) {
    auto choice = ChooseDevice(Sim(), request, cpus, threads);
    EXPECT_TRUE(choice.ok()) << choice.status().ToString();
    return choice.ok() ? *choice : DeviceChoice{};
  }
};

TEST_F(DeviceChoiceTest, TheProfileSetsEachDevicesNumaNode) {
  for (auto [name, node] : {std::pair{"bxsim0", 0}, {"bxsim1", 1}, {"bxsim2", 1}}) {
    auto device = Device::Open(Sim(), name);
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    EXPECT_EQ(DeviceNumaNode(*device), node) << name;
  }
}

// The acceptance: with a device on each node, each I/O thread is placed on its node's
// NIC; a process whose threads are all on node 1 runs on node 1's NIC.
TEST_F(DeviceChoiceTest, EachIoThreadPrefersTheNicOnItsNode) {
  DeviceChoice both = Choose("bxsim0,bxsim1", {0, 1}, 2);
  ASSERT_EQ(both.io_threads.size(), 2u);
  EXPECT_EQ(both.io_threads[0].node, 0);
  EXPECT_EQ(both.io_threads[0].preferred, "bxsim0");
  EXPECT_EQ(both.io_threads[1].node, 1);
  EXPECT_EQ(both.io_threads[1].preferred, "bxsim1");
  EXPECT_EQ(both.device, "bxsim0") << "one device per process: a tie goes to the first thread's";

  DeviceChoice on_node1 = Choose("", {1}, 1);
  EXPECT_EQ(on_node1.device, "bxsim1") << on_node1.reason;
  EXPECT_NE(on_node1.reason.find("NUMA node 1"), std::string::npos) << on_node1.reason;
  DeviceChoice on_node0 = Choose("", {0}, 1);
  EXPECT_EQ(on_node0.device, "bxsim0") << on_node0.reason;
  // Three threads, two on node 1: the majority's NIC.
  EXPECT_EQ(Choose("", {0, 1, 1}, 3).device, "bxsim1");
}

TEST_F(DeviceChoiceTest, ANodeWithoutAUsableNicFallsBackToTheFirstCandidate) {
  setenv("BX_TEST_CPU_NODES", "0:0;2:1", 1);  // CPU 1 on node 2, where no NIC is
  DeviceChoice choice = Choose("bxsim1,bxsim0", {1}, 1);
  EXPECT_EQ(choice.device, "bxsim1");
  EXPECT_EQ(choice.io_threads[0].preferred, "");
  EXPECT_NE(choice.reason.find("first candidate"), std::string::npos) << choice.reason;
}

TEST_F(DeviceChoiceTest, ANicWhoseNamedPortIsDownIsNotPreferred) {
  // bxsim1's port 1 is not cabled: on node 1, bxsim2 serves instead.
  DeviceChoice choice = Choose("bxsim0,bxsim1:1,bxsim2", {1}, 1);
  EXPECT_EQ(choice.device, "bxsim2") << choice.reason;
  EXPECT_EQ(Choose("bxsim0,bxsim1:2,bxsim2", {1}, 1).device, "bxsim1");
}

TEST_F(DeviceChoiceTest, ARequestNamesDevicesAndPorts) {
  DeviceChoice named = Choose("bxsim1:2", {0}, 1);
  EXPECT_EQ(named.device, "bxsim1") << "one named device is used wherever the threads are";
  EXPECT_EQ(named.port, 2);
  EXPECT_EQ(Choose("bxsim1", {}, 1).port, 0) << "no port named: the first active one";

  auto missing = ChooseDevice(Sim(), "bxsim0,nosuch", {}, 1);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("bxsim0, bxsim1, bxsim2"), std::string::npos);
  EXPECT_EQ(ChooseDevice(Sim(), "bxsim0:x", {}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ChooseDevice(Sim(), "bxsim0,", {}, 1).status().code(), StatusCode::kInvalidArgument);
}

// A dual-port NIC: port 2 is used when port 1 is down, and a named port is checked.
TEST_F(DeviceChoiceTest, PortTwoServesWhenPortOneIsDown) {
  auto device = Device::Open(Sim(), "bxsim1");
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  auto first = FirstActivePort(*device);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, 2);
  EXPECT_EQ(CheckPortActive(*device, 2).status().code(), StatusCode::kOk);
  auto down = CheckPortActive(*device, 1);
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(down.status().message().find("PORT_DOWN"), std::string::npos)
      << down.status().ToString();
  EXPECT_EQ(CheckPortActive(*device, 3).status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuNodesTest, ParsesTheTestMapAndRefusesGarbage) {
  auto nodes = CpuNodes::Parse("0:0-1;1:2,3");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ(nodes->NodeOf(1), 0);
  EXPECT_EQ(nodes->NodeOf(3), 1);
  EXPECT_EQ(nodes->NodeOf(4), -1);
  EXPECT_FALSE(CpuNodes::Parse("0-1").ok());
  EXPECT_FALSE(CpuNodes::Parse("a:0").ok());
  EXPECT_FALSE(CpuNodes::Parse("0:3-1").ok());
}

}  // namespace
}  // namespace bx::verbs

int main(int argc, char** argv) {
  // Before the simnic loads: it reads the profiles once, when its fabric starts.
  setenv("BX_SIM_PROFILE", "default@0,roce2@1,default@1", 1);
  setenv("BX_SIM_DEVICES", "3", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
