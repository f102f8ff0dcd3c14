// The simnic's device profiles as a verbs program meets them (src/simnic/device_profile.h), and
// the addressing of verbs/port_address.h on them. main() gives this process BX_SIM_PROFILE=
// roce,ib,roce2 before the simnic loads: bxsim0 is a RoCE v2 NIC, bxsim1 an InfiniBand HCA,
// bxsim2 a dual-port RoCE NIC cabled on port 2 only.
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "verbs/port_address.h"
#include "verbs/rc_connect.h"
#include "verbs/selfcheck.h"

namespace bx::verbs {
namespace {

using namespace std::chrono_literals;

Library& Sim() {
  static Library* lib = [] {
    auto loaded = Library::Load("sim");
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? loaded->release() : nullptr;
  }();
  return *lib;
}

Device Open(const char* name) {
  auto device = Device::Open(Sim(), name);
  EXPECT_TRUE(device.ok()) << device.status().ToString();
  return std::move(device).value();
}

bxsim_device_counters Counters(const Device& device) {
  bxsim_device_counters c{};
  Sim().sim().query_counters(device.context(), &c);
  return c;
}

// Two QPs on one device, each connected to the other with `options` (remote address chosen by
// `route`), and a registered buffer on each side: enough to see whether a write gets through.
struct Loop {
  explicit Loop(const Device& device) : device(device) {
    QueuePairAttrs attrs;
    attrs.signal_all = true;
    for (int i = 0; i < 2; ++i) {
      auto qp = CreateRcQueuePair(Sim(), device.context(), device.pd(), attrs);
      EXPECT_TRUE(qp.ok()) << qp.status().ToString();
      qps.push_back(std::move(qp).value());
      mrs.push_back(Sim().reg_mr(device.pd(), buffers[i], sizeof buffers[i],
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
    }
  }
  ~Loop() {
    qps.clear();
    for (ibv_mr* mr : mrs) Sim().dereg_mr(mr);
  }
  Status Connect(const RcOptions& options, const ibv_gid& remote_gid, uint8_t port = 1) {
    for (int i = 0; i < 2; ++i) {
      BX_RETURN_IF_ERROR(
          ConnectRc(Sim(), qps[i].qp(), port, qps[1 - i].qp_num(), remote_gid, options));
    }
    return Status::Ok();
  }
  // Writes 64 bytes from QP 0 into QP 1's buffer; the completion's status.
  ibv_wc_status Write() {
    std::memset(buffers[0], 0x5a, 64);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffers[0]), 64, mrs[0]->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buffers[1]);
    wr.wr.rdma.rkey = mrs[1]->rkey;
    ibv_send_wr* bad = nullptr;
    if (Library::PostSend(qps[0].qp(), &wr, &bad) != 0) return IBV_WC_GENERAL_ERR;
    ibv_wc wc{};
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (Library::PollCq(qps[0].cq(), 1, &wc) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return IBV_WC_GENERAL_ERR;
      std::this_thread::sleep_for(100us);
    }
    return wc.status;
  }

  const Device& device;
  std::vector<RcQueuePair> qps;
  std::vector<ibv_mr*> mrs;
  uint8_t buffers[2][256] = {};
};

// The device's IPv4 address as the simnic derives it, from its IPv4-mapped RoCE v2 GID.
sockaddr_in DeviceIpv4(const std::vector<GidTableEntry>& table) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  for (const GidTableEntry& e : table)
    if (e.type == IBV_GID_TYPE_ROCE_V2 && e.gid.raw[10] == 0xff)
      std::memcpy(&a.sin_addr, &e.gid.raw[12], 4);
  return a;
}

TEST(DeviceProfilesTest, TheRocePortHasRoceV1AndV2GidsForLinkLocalAndIpv4Addresses) {
  Device roce = Open("bxsim0");
  ibv_port_attr port = roce.port(1);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(port.active_mtu, IBV_MTU_1024) << "an Ethernet MTU of 1500";
  EXPECT_EQ(port.lid, 0);
  EXPECT_GT(port.gid_tbl_len, 4);
  auto table = QueryGidTable(roce, 1);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_EQ(table->size(), 4u) << "the rest of the table is empty";
  const ibv_gid_type types[] = {IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2, IBV_GID_TYPE_ROCE_V1,
                                IBV_GID_TYPE_ROCE_V2};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*table)[i].type, types[i]) << "index " << i;
  EXPECT_EQ((*table)[0].gid.raw[0], 0xfe) << "link-local";
  EXPECT_EQ(FormatGidAddress((*table)[3].gid).rfind("::ffff:127.", 0), 0u)
      << FormatGidAddress((*table)[3].gid);
  // An empty entry: ibv_query_gid gives the zero GID, as on hardware.
  ibv_gid empty{};
  empty.raw[0] = 1;
  ASSERT_EQ(Sim().query_gid(roce.context(), 1, 5, &empty), 0);
  EXPECT_EQ(FormatGidAddress(empty), "::");
}

TEST(DeviceProfilesTest, TheRoceAddressFollowsTheBootstrapAddressAndAnOverride) {
  Device roce = Open("bxsim0");
  auto table = QueryGidTable(roce, 1);
  ASSERT_TRUE(table.ok());
  sockaddr_in own = DeviceIpv4(*table);
  auto address = ResolvePortAddress(roce, 1, reinterpret_cast<sockaddr*>(&own), -1);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(address->gid_index, 3u);
  EXPECT_NE(address->reason.find("bootstrap address"), std::string::npos) << address->reason;
  auto overridden = ResolvePortAddress(roce, 1, reinterpret_cast<sockaddr*>(&own), 1);
  ASSERT_TRUE(overridden.ok());
  EXPECT_EQ(overridden->gid_index, 1u);
}

TEST(DeviceProfilesTest, TheInfinibandPortHasALidAndAnIbGid) {
  Device ib = Open("bxsim1");
  ibv_port_attr port = ib.port(1);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_GT(port.lid, 0);
  EXPECT_LT(port.lid, 0xc000);
  auto table = QueryGidTable(ib, 1);
  ASSERT_TRUE(table.ok());
  ASSERT_EQ(table->size(), 1u);
  EXPECT_EQ((*table)[0].type, IBV_GID_TYPE_IB);
  auto address = ResolvePortAddress(ib, 1, nullptr, -1);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(address->lid, port.lid);
  EXPECT_EQ(address->link_layer, IBV_LINK_LAYER_INFINIBAND);
}

TEST(DeviceProfilesTest, ARoceQpWithoutAGrhOrWithAnEmptySourceGidFailsAtRtr) {
  Device roce = Open("bxsim0");
  Loop loop(roce);
  RcOptions options;
  options.global = false;
  Status no_grh = loop.Connect(options, roce.gid(1, 3));
  ASSERT_FALSE(no_grh.ok());
  EXPECT_NE(no_grh.message().find("INIT->RTR"), std::string::npos) << no_grh.ToString();
  Loop again(roce);
  RcOptions empty_entry;
  empty_entry.gid_index = 9;
  EXPECT_FALSE(again.Connect(empty_entry, roce.gid(1, 3)).ok());
}

TEST(DeviceProfilesTest, AnInfinibandQpReachesItsPeerByLid) {
  Device ib = Open("bxsim1");
  Loop loop(ib);
  RcOptions options;
  options.global = false;
  options.remote_lid = ib.port(1).lid;
  ASSERT_TRUE(loop.Connect(options, ibv_gid{}).ok());
  EXPECT_EQ(loop.Write(), IBV_WC_SUCCESS);
  EXPECT_EQ(loop.buffers[1][63], 0x5a);

  // A LID nobody holds: nothing answers, as on a fabric.
  Loop lost(ib);
  options.remote_lid = uint16_t(ib.port(1).lid ^ 0x2000);
  options.retry_cnt = 1;
  options.timeout = 10;
  ASSERT_TRUE(lost.Connect(options, ibv_gid{}).ok());
  EXPECT_EQ(lost.Write(), IBV_WC_RETRY_EXC_ERR);
}

TEST(DeviceProfilesTest, RoceV1AndUnmarkedPacketsShowInTheCountersAndV2MarkedOnesDoNot) {
  Device roce = Open("bxsim0");
  const ibv_gid ipv4_v2 = roce.gid(1, 3);
  Loop marked(roce);
  RcOptions v2;
  v2.gid_index = 3;
  v2.traffic_class = 106;
  ASSERT_TRUE(marked.Connect(v2, ipv4_v2).ok());
  bxsim_device_counters before = Counters(roce);
  ASSERT_EQ(marked.Write(), IBV_WC_SUCCESS) << "reached by its IPv4-mapped GID";
  bxsim_device_counters after = Counters(roce);
  EXPECT_EQ(after.packets_sent, before.packets_sent + 1);
  EXPECT_EQ(after.roce_v1_packets, before.roce_v1_packets);
  EXPECT_EQ(after.unmarked_packets, before.unmarked_packets);

  Loop v1(roce);
  RcOptions v1_unmarked;  // index 0 (RoCE v1), traffic class 0: what a naive program does
  ASSERT_TRUE(v1.Connect(v1_unmarked, roce.gid(1, 0)).ok());
  before = Counters(roce);
  ASSERT_EQ(v1.Write(), IBV_WC_SUCCESS);
  after = Counters(roce);
  EXPECT_EQ(after.roce_v1_packets, before.roce_v1_packets + 1);
  EXPECT_EQ(after.unmarked_packets, before.unmarked_packets + 1);
}

TEST(DeviceProfilesTest, InlineSizeAndParentDomainsFollowTheProfile) {
  Device roce = Open("bxsim0");
  Device ib = Open("bxsim1");
  QueuePairAttrs attrs;
  attrs.max_inline_data = 220;
  EXPECT_TRUE(CreateRcQueuePair(Sim(), roce.context(), roce.pd(), attrs).ok());
  attrs.max_inline_data = 221;
  EXPECT_FALSE(CreateRcQueuePair(Sim(), roce.context(), roce.pd(), attrs).ok());
  attrs.max_inline_data = 189;
  EXPECT_FALSE(CreateRcQueuePair(Sim(), ib.context(), ib.pd(), attrs).ok());

  for (Device* device : {&roce, &ib}) {
    ibv_td_init_attr td_attr{};
    ibv_td* td = Library::AllocTd(device->context(), &td_attr);
    ASSERT_NE(td, nullptr);
    ibv_parent_domain_init_attr attr{};
    attr.pd = device->pd();
    attr.td = td;
    errno = 0;
    ibv_pd* parent = Library::AllocParentDomain(device->context(), &attr);
    if (device == &roce) {
      EXPECT_EQ(parent, nullptr);
      EXPECT_EQ(errno, EOPNOTSUPP);
    } else {
      EXPECT_NE(parent, nullptr);
    }
    if (parent != nullptr) Sim().dealloc_pd(parent);
    Library::DeallocTd(td);
  }
}

TEST(DeviceProfilesTest, TheFirstActivePortIsUsedAndNoneIsAClearError) {
  Device roce = Open("bxsim0");
  auto port = FirstActivePort(roce);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  EXPECT_EQ(*port, 1);
  ASSERT_EQ(Sim().sim().set_link(roce.context(), 0), 0);
  auto none = FirstActivePort(roce);
  ASSERT_EQ(Sim().sim().set_link(roce.context(), 1), 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("1 PORT_DOWN"), std::string::npos)
      << none.status().ToString();
  EXPECT_EQ(DeviceNumaNode(roce), -1) << "the simnic has no PCI device";
}

TEST(DeviceProfilesTest, ADualPortNicCabledOnPortTwoIsUsedThroughPortTwo) {
  Device dual = Open("bxsim2");
  EXPECT_EQ(dual.attr().phys_port_cnt, 2);
  EXPECT_EQ(dual.port(1).state, IBV_PORT_DOWN);
  auto empty = QueryGidTable(dual, 1);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty()) << "no addresses on a port that is not cabled";
  auto port = FirstActivePort(dual);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  ASSERT_EQ(*port, 2);
  auto address = ResolvePortAddress(dual, *port, nullptr, -1);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(address->gid_index, 3u);
  Loop loop(dual);
  RcOptions options;
  options.gid_index = uint8_t(address->gid_index);
  ASSERT_TRUE(loop.Connect(options, address->gid, *port).ok());
  EXPECT_EQ(loop.Write(), IBV_WC_SUCCESS);
  // Port 1 has no source GID for a RoCE path at all.
  Loop dead(dual);
  EXPECT_FALSE(dead.Connect(options, address->gid, 1).ok());
  SelfCheckOptions self;
  self.device_a = self.device_b = "bxsim2";
  EXPECT_EQ(RunSelfCheck(Sim(), self).failed(), 0) << "the self-check finds port 2 itself";
}

// As rdma_cm and NCCL let an operator name the interface: a device found by the network device
// its GIDs live on (the simnic's RoCE addresses are on loopback; an InfiniBand port has none).
TEST(DeviceProfilesTest, ADeviceIsFoundByTheNetworkDeviceItServes) {
  auto by_netdev = Device::Open(Sim(), "lo");
  ASSERT_TRUE(by_netdev.ok()) << by_netdev.status().ToString();
  EXPECT_EQ(by_netdev->name(), "bxsim0");
  auto none = Device::Open(Sim(), "eth9");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("network device"), std::string::npos);
}

// `bx selfcheck` on each profile (a device to itself), and across the two, which must fail at
// connect saying why.
TEST(DeviceProfilesTest, TheSelfCheckPassesOnEachProfileAndRefusesToMixThem) {
  for (const char* device : {"bxsim0", "bxsim1"}) {
    SelfCheckOptions options;
    options.device_a = options.device_b = device;
    SelfCheckReport report = RunSelfCheck(Sim(), options);
    EXPECT_EQ(report.failed(), 0) << device;
    EXPECT_EQ(report.passed(), 8) << device;
    for (const CheckResult& c : report.checks)
      EXPECT_TRUE(c.passed) << device << ": " << c.name << ": " << c.detail;
  }
  SelfCheckReport mixed = RunSelfCheck(Sim(), SelfCheckOptions{});
  ASSERT_EQ(mixed.failed(), 1);
  EXPECT_EQ(mixed.checks.back().name, "connect rc");
  EXPECT_NE(mixed.checks.back().detail.find("different link layers"), std::string::npos)
      << mixed.checks.back().detail;
}

}  // namespace
}  // namespace bx::verbs

int main(int argc, char** argv) {
  // Before the simnic loads: it reads the profile once, when its fabric starts.
  setenv("BX_SIM_PROFILE", "roce,ib,roce2", 1);
  setenv("BX_SIM_DEVICES", "3", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
