// An rdma:// transport on a dual-NUMA host runs on the NIC of its I/O threads' node
// (verbs/device_choice.h). The simnic's profile puts bxsim0 on node 0 and bxsim1 on node 1, and
// BX_TEST_CPU_NODES puts CPU 0 on node 0 and CPU 1 on node 1. Each test is a process of its own
// (gtest_discover_tests), set up before the simnic loads.
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "bx/buffer.h"
#include "bx/transport.h"
#include "transport/rdma/rdma_transport.h"

namespace bx {
namespace {

using namespace std::chrono_literals;

class LocalityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    if (!CPU_ISSET(0, &allowed) || !CPU_ISSET(1, &allowed))
      GTEST_SKIP() << "needs CPUs 0 and 1 to pin I/O threads to";
    setenv("BX_SIM_PROFILE", "default@0,default@1", 1);
    setenv("BX_TEST_CPU_NODES", "0:0;1:1", 1);
    unsetenv("BX_DEVICE");
    unsetenv("BX_IO_CPUS");
  }
};

TEST_F(LocalityTest, ATransportWhoseIoThreadIsOnNodeOneRunsOnNodeOnesNic) {
  TransportOptions options;
  options.io_cpus = {1};
  auto transport = rdma::CreateRdmaTransport(options);
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  auto info = rdma::GetRdmaTransportInfo(**transport);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->device, "bxsim1") << info->device_reason;
  EXPECT_NE(info->device_reason.find("NUMA node 1"), std::string::npos) << info->device_reason;
  ASSERT_EQ(info->io_thread_devices.size(), 1u);
  EXPECT_EQ(info->io_thread_devices[0].node, 1);

  // And it carries messages there.
  auto listener = (*transport)->Listen("rdma://127.0.0.1:0", [](const std::shared_ptr<Socket>&) {
    SocketHandlers handlers;
    handlers.on_message = [](Socket& s, Buffer message) { s.Send(std::move(message)); };
    return handlers;
  });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto socket = (*transport)->Connect((*listener)->url(), {}, 10s);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  Result<Buffer> message = Buffer::Allocate(64 << 10);
  ASSERT_TRUE(message.ok());
  (*socket)->Send(std::move(message).value());
  EXPECT_TRUE((*socket)->Receive(10s).ok());
}

TEST_F(LocalityTest, EachIoThreadIsPlacedOnItsNodesNicAndTheProcessOnOne) {
  TransportOptions options;
  options.io_threads = 2;
  options.io_cpus = {0, 1};
  auto transport = rdma::CreateRdmaTransport(options);
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  auto info = rdma::GetRdmaTransportInfo(**transport);
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->io_thread_devices.size(), 2u);
  EXPECT_EQ(info->io_thread_devices[0].preferred, "bxsim0");
  EXPECT_EQ(info->io_thread_devices[1].preferred, "bxsim1");
  // bemalloc registers on one device, so both threads run on the first thread's NIC.
  EXPECT_EQ(info->device, "bxsim0") << info->device_reason;
}

TEST_F(LocalityTest, ANamedDeviceWinsOverLocality) {
  TransportOptions options;
  options.io_cpus = {1};
  options.device = "bxsim0";
  auto transport = rdma::CreateRdmaTransport(options);
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  auto info = rdma::GetRdmaTransportInfo(**transport);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->device, "bxsim0") << info->device_reason;
}

}  // namespace
}  // namespace bx
