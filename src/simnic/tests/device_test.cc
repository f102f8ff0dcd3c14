// Devices, ports, GIDs, memory registration rules, thread and parent domains, link model.
#include <endian.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "simnic_fixture.h"

namespace bx::simnic::testing {
namespace {

TEST(DeviceTest, ListsSimDevicesWithRoceV2Ports) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(n, 2);
  EXPECT_STREQ(ibv_get_device_name(list[0]), "bxsim0");
  EXPECT_STREQ(ibv_get_device_name(list[1]), "bxsim1");
  EXPECT_EQ(list[n], nullptr);
  EXPECT_NE(ibv_get_device_guid(list[0]), ibv_get_device_guid(list[1]));
  ibv_context* ctx = ibv_open_device(list[0]);
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
  EXPECT_EQ(attr.phys_port_cnt, 1);
  EXPECT_GE(attr.max_qp_wr, 1024);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx, 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_NE(ibv_query_port(ctx, 2, &port), 0) << "one port only";
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[0], 0xfe);
  EXPECT_NE(ibv_query_gid(ctx, 1, 1, &gid), 0);
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &ex), 0);
  EXPECT_EQ(ex.orig_attr.max_qp_wr, attr.max_qp_wr);
  EXPECT_EQ(ibv_close_device(ctx), 0);
  ibv_free_device_list(list);
}

TEST(DeviceTest, RegistrationFollowsTheManPage) {
  ibv_context* ctx = OpenDevice("bxsim0");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  std::vector<uint8_t> buf(8192);
  // ibv_reg_mr is a verbs.h macro that ANDs `access` with IBV_ACCESS_OPTIONAL_RANGE, an
  // enumerator of another enum: a lone ibv_access_flags enumerator there is a deprecated C++20
  // enum-enum operation (clang -Wdeprecated-enum-enum-conversion), so pass the int it takes.
  constexpr int kLocalWrite = IBV_ACCESS_LOCAL_WRITE;
  constexpr int kRemoteWrite = IBV_ACCESS_REMOTE_WRITE;
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf.data(), buf.size(), kRemoteWrite), nullptr)
      << "remote write needs local write";
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_reg_mr(pd, buf.data(), 0, kLocalWrite), nullptr);
  // Unmapped memory cannot be pinned.
  void* hole = mmap(nullptr, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(hole, MAP_FAILED);
  munmap(hole, 1 << 20);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, hole, 1 << 20, kLocalWrite), nullptr);
  EXPECT_EQ(errno, EFAULT);

  auto before = Counters(ctx);
  ibv_mr* mr =
      ibv_reg_mr(pd, buf.data(), buf.size(),
                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_RELAXED_ORDERING);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->addr, buf.data());
  EXPECT_EQ(mr->length, buf.size());
  EXPECT_EQ(Counters(ctx).registered_bytes - before.registered_bytes, buf.size());
  EXPECT_EQ(bxsim_is_registered(pd, buf.data() + 100, 200, IBV_ACCESS_REMOTE_READ), 1);
  EXPECT_EQ(bxsim_is_registered(pd, buf.data() + 8000, 200, 0), 0) << "runs past the MR";
  EXPECT_EQ(bxsim_is_registered(pd, buf.data(), 10, IBV_ACCESS_REMOTE_WRITE), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "an MR still uses the PD";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(Counters(ctx).registered_bytes, before.registered_bytes);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  ibv_close_device(ctx);
}

// Registration pins: every page is present once ibv_reg_mr returns (the NIC never takes a page
// fault mid-transfer), and a writable registration of read-only memory fails as pinning it would.
TEST(DeviceTest, RegistrationFaultsInEveryPage) {
  ibv_context* ctx = OpenDevice("bxsim0");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t length = 256 * page;
  auto resident = [&](void* at) {
    std::vector<unsigned char> vec(length / page);
    EXPECT_EQ(mincore(at, length, vec.data()), 0);
    size_t n = 0;
    for (unsigned char v : vec) n += v & 1;
    return n;
  };
  void* fresh = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(fresh, MAP_FAILED);
  EXPECT_EQ(resident(fresh), 0u) << "an untouched mapping has no pages yet";
  ibv_mr* mr = ibv_reg_mr(pd, fresh, length, int{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE});
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(resident(fresh), length / page);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(fresh, length);

  void* read_only = mmap(nullptr, length, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(read_only, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, read_only, length, int{IBV_ACCESS_LOCAL_WRITE}), nullptr);
  EXPECT_EQ(errno, EFAULT);
  mr = ibv_reg_mr(pd, read_only, length, int{IBV_ACCESS_REMOTE_READ});
  ASSERT_NE(mr, nullptr) << "read access pins read-only memory";
  EXPECT_EQ(resident(read_only), length / page);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(read_only, length);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// The GID table as libibverbs 1.11 reads it, and ibv_devinfo's private type query: one RoCE v2
// entry at index 0 (ibv_devinfo -v and rdma-core's test_device crashed in libibverbs before).
TEST(DeviceTest, GidTableHasOneRoceV2Entry) {
  ibv_context* ctx = OpenDevice("bxsim0");
  ASSERT_NE(ctx, nullptr);
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
  ibv_gid_entry entry{};
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &entry, 0), 0);
  EXPECT_EQ(0, std::memcmp(entry.gid.raw, gid.raw, sizeof(gid.raw)));
  EXPECT_EQ(entry.gid_type, uint32_t(IBV_GID_TYPE_ROCE_V2));
  EXPECT_EQ(entry.port_num, 1u);
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 1, &entry, 0), ENODATA) << "one entry only";
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 0, &entry, 1), EINVAL) << "no flags defined";
  ibv_gid_entry table[4]{};
  ASSERT_EQ(ibv_query_gid_table(ctx, table, 4, 0), 1);
  EXPECT_EQ(table[0].gid_index, 0u);
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &ex), 0);
  EXPECT_EQ(ex.phys_port_cnt_ex, 1u);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// What the simnic does not implement fails as on a device without it, not by falling through to
// the system libibverbs (which crashed ibv_srq_pingpong and rdma-core's test_addr and test_odp).
TEST(DeviceTest, UnimplementedVerbsFailWithEopnotsupp) {
  ibv_context* ctx = OpenDevice("bxsim0");
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  // Basic SRQs are implemented (srq_test.cc); XRC and tag-matching ones are not.
  ibv_srq_init_attr_ex srq{};
  srq.attr.max_wr = 16;
  srq.attr.max_sge = 1;
  srq.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
  srq.srq_type = IBV_SRQT_TM;
  srq.pd = pd;
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(ctx, &srq), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_attach_mcast(nullptr, nullptr, 0), EOPNOTSUPP);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// Address handles as on a RoCE port: global only, kept until destroyed (holding
// their PD), and built from a received GRH back to its sender.
TEST(DeviceTest, AddressHandlesAreGlobalAndComeBackFromAReceivedGrh) {
  ibv_context* ctx = OpenDevice("bxsim0");
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_gid ours{};
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &ours), 0);
  ibv_ah_attr attr{};
  attr.port_num = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd, &attr), nullptr) << "a non-global AH on RoCE";
  EXPECT_EQ(errno, EINVAL);
  attr.is_global = 1;
  attr.grh.dgid = ours;
  attr.grh.hop_limit = 1;
  ibv_ah* ah = ibv_create_ah(pd, &attr);
  ASSERT_NE(ah, nullptr) << strerror(errno);
  EXPECT_EQ(ah->pd, pd);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "the AH holds its PD";
  EXPECT_EQ(ibv_destroy_ah(ah), 0);

  // A received packet's GRH (as a UD receive buffer starts with it): from a peer, to us.
  ibv_grh grh{};
  grh.version_tclass_flow = htobe32((6u << 28) | (0x28u << 20) | 0x12345u);
  grh.sgid.raw[0] = 0xfe;
  grh.sgid.raw[1] = 0x80;
  grh.sgid.raw[15] = 0x42;
  grh.dgid = ours;
  ibv_wc wc{};
  wc.wc_flags = IBV_WC_GRH;
  ibv_ah_attr back{};
  ASSERT_EQ(ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &back), 0);
  EXPECT_TRUE(back.is_global);
  EXPECT_EQ(std::memcmp(back.grh.dgid.raw, grh.sgid.raw, 16), 0) << "back to the sender";
  EXPECT_EQ(back.grh.traffic_class, 0x28);
  EXPECT_EQ(back.grh.flow_label, 0x12345u);
  ah = ibv_create_ah_from_wc(pd, &wc, &grh, 1);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  wc.wc_flags = 0;
  EXPECT_EQ(ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &back), -1) << "no GRH: no way back";
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// Found like a device: ibdev_path and dev_path name a per-process, sysfs-shaped
// directory that says what the verbs say, and the port's state follows the link.
TEST(DeviceTest, IsFoundLikeADeviceThroughItsSysfsPaths) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ibv_device* device = nullptr;
  for (int i = 0; i < n; ++i) {
    if (std::strcmp(ibv_get_device_name(list[i]), "bxsim0") == 0) device = list[i];
  }
  ASSERT_NE(device, nullptr);
  const std::string ibdev = device->ibdev_path, uverbs = device->dev_path;
  EXPECT_NE(ibdev.find("bxsim-sysfs." + std::to_string(getpid()) + "/class/infiniband/bxsim0"),
            std::string::npos)
      << ibdev;
  ibv_context* ctx = ibv_open_device(device);
  ibv_free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  auto read = [](const std::string& dir, const char* file) {  // one line, as sysfs gives it
    std::ifstream in(dir + "/" + file);
    std::string line = "(missing)";
    std::getline(in, line);
    return line;
  };
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
  uint8_t guid[8];
  std::memcpy(guid, &attr.node_guid, sizeof guid);
  char want[32];
  std::snprintf(want, sizeof want, "%02x%02x:%02x%02x:%02x%02x:%02x%02x", guid[0], guid[1], guid[2],
                guid[3], guid[4], guid[5], guid[6], guid[7]);
  EXPECT_EQ(read(ibdev, "node_guid"), want);
  EXPECT_EQ(read(ibdev, "node_type"), "1: CA");
  EXPECT_EQ(read(ibdev, "device/vendor"), "0x0b5e");
  EXPECT_EQ(read(ibdev, "ports/1/link_layer"), "Ethernet");
  EXPECT_EQ(read(ibdev, "ports/1/gid_attrs/types/0"), "RoCE v2");
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
  std::string gid_text;
  for (int g = 0; g < 8; ++g) {
    char part[6];
    std::snprintf(part, sizeof part, "%02x%02x", gid.raw[2 * g], gid.raw[2 * g + 1]);
    if (g > 0) gid_text += ':';
    gid_text += part;
  }
  EXPECT_EQ(read(ibdev, "ports/1/gids/0"), gid_text);
  EXPECT_EQ(read(uverbs, "ibdev"), "bxsim0");
  EXPECT_EQ(read(ibdev, "ports/1/state"), "4: ACTIVE");
  ASSERT_EQ(bxsim_set_link(ctx, 0), 0);
  EXPECT_EQ(read(ibdev, "ports/1/state"), "1: DOWN");
  EXPECT_EQ(read(ibdev, "ports/1/phys_state"), "3: Disabled");
  ASSERT_EQ(bxsim_set_link(ctx, 1), 0);
  EXPECT_EQ(read(ibdev, "ports/1/state"), "4: ACTIVE");
  // The async events the link changes raised are not this test's business.
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST(DeviceTest, ForkInitIsRemembered) {
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_DISABLED);
  ASSERT_EQ(ibv_fork_init(), 0);
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_ENABLED);
}

using ReregTest = SimPairTest;

// ibv_rereg_mr keeps the keys and changes what they grant: access, then translation.
TEST_F(ReregTest, NewAccessAndTranslationApplyToTheSameKeys) {
  Connect();
  auto src = Register(a_.pd, 4096);
  auto dst = Register(b_.pd, 4096);
  std::memset(src->data(), 0x11, 4096);
  const uint32_t rkey = dst->mr->rkey;

  // A new translation: the same rkey now reaches another buffer, at that buffer's address.
  std::vector<uint8_t> moved(8192, 0);
  ASSERT_EQ(ibv_rereg_mr(dst->mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, moved.data(),
                         moved.size(), 0),
            0);
  EXPECT_EQ(dst->mr->rkey, rkey);
  ibv_sge s{src->addr(), 4096, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED,
                     reinterpret_cast<uint64_t>(moved.data()) + 4096, rkey),
            0);
  auto wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[0].status);
  EXPECT_EQ(moved[4096], 0x11);
  EXPECT_EQ(moved[8191], 0x11);
  EXPECT_EQ(dst->data()[0], 0) << "the old buffer is no longer registered under the key";

  // Bad input changes nothing and says so.
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(dst->mr, 0, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_rereg_mr(dst->mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_REMOTE_WRITE),
            IBV_REREG_MR_ERR_INPUT)
      << "remote write needs local write";

  // Without remote write, the same key no longer lets the peer write.
  ASSERT_EQ(ibv_rereg_mr(dst->mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE),
            0);
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 2, &s, 1, IBV_SEND_SIGNALED,
                     reinterpret_cast<uint64_t>(moved.data()), rkey),
            0);
  wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  // Back to the Region's own buffer before it deregisters.
  ASSERT_EQ(ibv_rereg_mr(dst->mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, dst->data(), 4096, 0),
            0);
}

using DomainTest = SimPairTest;

TEST_F(DomainTest, ThreadAndParentDomainsCarryTraffic) {
  QpOptions o;
  o.use_parent_domain = true;
  Connect(o, o);
  EXPECT_EQ(ibv_dealloc_td(a_.td), EBUSY) << "a parent domain uses it";
  // Memory registered on the plain PD is usable by a QP created on the parent domain over it.
  auto src = Register(a_.pd, 4096);
  auto dst = Register(b_.pd, 4096);
  FillRandom(src->data(), 4096, 2);
  ibv_sge s{src->addr(), 4096, src->mr->lkey};
  ASSERT_EQ(
      PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, dst->addr(), dst->mr->rkey),
      0);
  auto wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(src->data(), dst->data(), 4096));
  // A parent domain needs a protection domain.
  ibv_parent_domain_init_attr bad{};
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(a_.ctx, &bad), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(DomainTest, LinkModelDelaysCompletionsByWireTime) {
  Connect();
  // 1 Gbps: 1 MB takes 8.4 ms on the wire, so the completion cannot come sooner.
  ASSERT_EQ(bxsim_set_link_model(a_.ctx, 1.0, 10'000), 0);
  auto src = Register(a_.pd, 1 << 20);
  auto dst = Register(b_.pd, 1 << 20);
  ibv_sge s{src->addr(), 1 << 20, src->mr->lkey};
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(
      PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, dst->addr(), dst->mr->rkey),
      0);
  auto wc = PollN(a_.send_cq, 1);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_GE(elapsed, std::chrono::microseconds(8388 + 10));
  ASSERT_EQ(bxsim_set_link_model(a_.ctx, 0, 0), 0);
}

TEST(HardwareThreadTest, CpuTimeIsReportedApart) {
  ibv_context* ctx = OpenDevice("bxsim0");  // opening a device starts the hardware thread
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  uint64_t first = bxsim_hardware_cpu_ns();
  EXPECT_GT(first, 0u);
  ibv_close_device(ctx);
}

}  // namespace
}  // namespace bx::simnic::testing
