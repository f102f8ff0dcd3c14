// Type 2B memory windows: a window grants the peer remote access to part of an MR, through one
// QP, until a local invalidate, a SEND_WITH_INV or a rebind with a new tag takes it back. An
// access outside the grant is a remote access error that ends that QP pair and no other.
#include "simnic_fixture.h"

namespace bx::simnic::testing {
namespace {

constexpr size_t kPage = 4096;
// The window covers the middle page of a three-page region; the pages around it are neighbours
// that the peer must never reach.
constexpr uint64_t kWindowOffset = kPage;
constexpr uint64_t kWindowLength = kPage;
constexpr uint8_t kSentinel = 0x5a;
// The region's own access: no remote rights at all, so only a window can grant any.
constexpr int kWindowedMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;

int PostBind(ibv_qp* qp, ibv_mw* mw, ibv_mr* mr, uint64_t addr, uint64_t length, int access,
             uint32_t rkey, uint64_t wr_id = 100) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info.mr = mr;
  wr.bind_mw.bind_info.addr = addr;
  wr.bind_mw.bind_info.length = length;
  wr.bind_mw.bind_info.mw_access_flags = unsigned(access);
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// Posts a work request whose invalidate_rkey is `rkey` (LOCAL_INV, or SEND_WITH_INV of `sge`).
int PostInvalidate(ibv_qp* qp, ibv_wr_opcode op, uint32_t rkey, ibv_sge* sge = nullptr,
                   int num_sge = 0, uint64_t wr_id = 200) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

ibv_wc_status OneStatus(ibv_cq* cq, ibv_wc* out = nullptr) {
  auto wc = PollN(cq, 1);
  EXPECT_EQ(wc.size(), 1u);
  if (wc.empty()) return IBV_WC_GENERAL_ERR;
  if (out != nullptr) *out = wc[0];
  return wc[0].status;
}

ibv_qp_state QpState(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
  return attr.qp_state;
}

class MemoryWindowTest : public SimPairTest {
 protected:
  // Connects a <-> b, registers b's three-page region and a's source, allocates b's window.
  void SetUpWindowPair() {
    Connect();
    target_ = Register(b_.pd, 3 * kPage, kWindowedMrAccess);
    std::memset(target_->data(), kSentinel, 3 * kPage);
    source_ = Register(a_.pd, 3 * kPage);
    FillRandom(source_->data(), 3 * kPage, 7);
    mw_ = ibv_alloc_mw(b_.pd, IBV_MW_TYPE_2);
    ASSERT_NE(mw_, nullptr) << strerror(errno);
  }

  // Binds the window on b's QP over the middle page with `access`; returns the new rkey.
  uint32_t BindMiddlePage(int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) {
    uint32_t rkey = ibv_inc_rkey(mw_->rkey);
    EXPECT_EQ(PostBind(b_.qp, mw_, target_->mr, target_->addr() + kWindowOffset, kWindowLength,
                       access, rkey),
              0);
    ibv_wc wc{};
    EXPECT_EQ(OneStatus(b_.send_cq, &wc), IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
    EXPECT_EQ(mw_->rkey, rkey) << "the window's rkey follows the bind";
    return rkey;
  }

  // a writes `length` bytes of its source at offset `offset` of b's region, through `rkey`.
  ibv_wc_status WriteAt(uint64_t offset, uint32_t length, uint32_t rkey, Endpoint* from = nullptr,
                        Region* source = nullptr) {
    Endpoint& ep = from ? *from : a_;
    Region& src = source ? *source : *source_;
    ibv_sge s{src.addr() + offset, length, src.mr->lkey};
    EXPECT_EQ(PostSend(ep.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED,
                       target_->addr() + offset, rkey),
              0);
    return OneStatus(ep.send_cq);
  }

  bool RangeIs(uint64_t offset, uint64_t length, uint8_t value) const {
    for (uint64_t i = offset; i < offset + length; ++i)
      if (target_->bytes[i] != value) return false;
    return true;
  }

  bool RangeCopied(uint64_t offset, uint64_t length) const {
    return std::memcmp(target_->bytes.data() + offset, source_->bytes.data() + offset, length) == 0;
  }

  void TearDown() override {
    if (mw_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_mw(mw_), 0);
    }
    target_.reset();
    source_.reset();
    SimPairTest::TearDown();
  }

  std::unique_ptr<Region> target_, source_;
  ibv_mw* mw_ = nullptr;
};

TEST_F(MemoryWindowTest, DeviceAdvertisesType2BWindowsOnly) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(a_.ctx, &attr), 0);
  EXPECT_GT(attr.max_mw, 0);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  ibv_pd* pd = ibv_alloc_pd(a_.ctx);
  ASSERT_NE(pd, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd, IBV_MW_TYPE_1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  EXPECT_EQ(mw->type, IBV_MW_TYPE_2);
  EXPECT_EQ(mw->pd, pd);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "the window holds the PD";
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(MemoryWindowTest, WriteAndReadInsideTheWindowSucceed) {
  SetUpWindowPair();
  uint32_t rkey = BindMiddlePage();
  EXPECT_EQ(WriteAt(kWindowOffset, kWindowLength, rkey), IBV_WC_SUCCESS);
  EXPECT_TRUE(RangeCopied(kWindowOffset, kWindowLength));
  EXPECT_TRUE(RangeIs(0, kWindowOffset, kSentinel));
  EXPECT_TRUE(RangeIs(kWindowOffset + kWindowLength, kPage, kSentinel));
  // READ through the window lands in a's buffer.
  auto back = Register(a_.pd, kPage);
  ibv_sge s{back->addr(), 512, back->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_READ, 2, &s, 1, IBV_SEND_SIGNALED,
                     target_->addr() + kWindowOffset + 100, rkey),
            0);
  EXPECT_EQ(OneStatus(a_.send_cq), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(back->data(), source_->data() + kWindowOffset + 100, 512), 0);
}

// rdma-core's tests (test_mr.MWTest) bind with LOCAL_WRITE among the window's access flags, as
// mlx5 accepts; it grants nothing more than the remote rights beside it.
TEST_F(MemoryWindowTest, LocalWriteInTheBindAccessIsAccepted) {
  SetUpWindowPair();
  uint32_t rkey = BindMiddlePage(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(WriteAt(kWindowOffset, kWindowLength, rkey), IBV_WC_SUCCESS);
  EXPECT_TRUE(RangeCopied(kWindowOffset, kWindowLength));
}

TEST_F(MemoryWindowTest, WriteOutsideTheWindowFailsAndEndsOnlyThatQp) {
  SetUpWindowPair();
  // A second, independent pair on the same two devices.
  Endpoint c, d;
  c.ctx = a_.ctx;
  d.ctx = b_.ctx;
  CreateQp(c, {});
  CreateQp(d, {});
  ConnectQp(c, d.qp->qp_num, d.gid, {});
  ConnectQp(d, c.qp->qp_num, c.gid, {});

  uint32_t rkey = BindMiddlePage();
  // 64 bytes that start 32 bytes before the window's end: half inside, half in the neighbour.
  const uint64_t straddle = kWindowOffset + kWindowLength - 32;
  EXPECT_EQ(WriteAt(straddle, 64, rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RangeIs(0, 3 * kPage, kSentinel)) << "not one byte of the failed write landed";
  EXPECT_EQ(QpState(a_.qp), IBV_QPS_ERR);
  EXPECT_EQ(QpState(b_.qp), IBV_QPS_ERR);
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(b_.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.element.qp, b_.qp);
  ibv_ack_async_event(&ev);

  // The other pair keeps working.
  EXPECT_EQ(QpState(c.qp), IBV_QPS_RTS);
  EXPECT_EQ(QpState(d.qp), IBV_QPS_RTS);
  auto src = Register(c.pd, 256);
  auto dst = Register(d.pd, 256);
  FillRandom(src->data(), 256, 3);
  ibv_sge s{src->addr(), 256, src->mr->lkey};
  ASSERT_EQ(
      PostSend(c.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, dst->addr(), dst->mr->rkey),
      0);
  EXPECT_EQ(OneStatus(c.send_cq), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(src->data(), dst->data(), 256), 0);
  src.reset();
  dst.reset();
  c.ctx = d.ctx = nullptr;  // the fixture closes the devices
  DestroyEndpoint(c);
  DestroyEndpoint(d);
}

TEST_F(MemoryWindowTest, RegionKeyAloneGrantsNoRemoteAccess) {
  SetUpWindowPair();
  BindMiddlePage();
  EXPECT_EQ(WriteAt(kWindowOffset, 64, target_->mr->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RangeIs(0, 3 * kPage, kSentinel));
}

TEST_F(MemoryWindowTest, WindowGrantsOnlyItsAccessRights) {
  SetUpWindowPair();
  uint32_t rkey = BindMiddlePage(IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(WriteAt(kWindowOffset, 64, rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RangeIs(0, 3 * kPage, kSentinel));
}

TEST_F(MemoryWindowTest, LocalInvalidateRevokesAccess) {
  SetUpWindowPair();
  uint32_t rkey = BindMiddlePage();
  EXPECT_EQ(WriteAt(kWindowOffset, 128, rkey), IBV_WC_SUCCESS);
  ASSERT_EQ(PostInvalidate(b_.qp, IBV_WR_LOCAL_INV, rkey), 0);
  ibv_wc wc{};
  EXPECT_EQ(OneStatus(b_.send_cq, &wc), IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(WriteAt(kWindowOffset + 128, 128, rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RangeIs(kWindowOffset + 128, 128, kSentinel));
}

TEST_F(MemoryWindowTest, SendWithInvalidateRevokesAccess) {
  SetUpWindowPair();
  uint32_t rkey = BindMiddlePage();
  auto inbox = Register(b_.pd, 64);
  ibv_sge r{inbox->addr(), 64, inbox->mr->lkey};
  ASSERT_EQ(PostRecv(b_.qp, 7, &r, 1), 0);
  ibv_sge s{source_->addr(), 16, source_->mr->lkey};
  ASSERT_EQ(PostInvalidate(a_.qp, IBV_WR_SEND_WITH_INV, rkey, &s, 1), 0);
  ibv_wc sent{};
  EXPECT_EQ(OneStatus(a_.send_cq, &sent), IBV_WC_SUCCESS);
  EXPECT_EQ(sent.opcode, IBV_WC_SEND);
  ibv_wc got{};
  ASSERT_EQ(OneStatus(b_.recv_cq, &got), IBV_WC_SUCCESS);
  EXPECT_EQ(got.opcode, IBV_WC_RECV);
  EXPECT_EQ(got.wr_id, 7u);
  EXPECT_EQ(got.byte_len, 16u);
  EXPECT_TRUE(got.wc_flags & IBV_WC_WITH_INV);
  EXPECT_FALSE(got.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(got.invalidated_rkey, rkey);
  EXPECT_EQ(std::memcmp(inbox->data(), source_->data(), 16), 0);
  EXPECT_EQ(WriteAt(kWindowOffset, 64, rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RangeIs(0, 3 * kPage, kSentinel));
}

TEST_F(MemoryWindowTest, SendWithInvalidateOfAnUnboundKeyFailsTheRequest) {
  SetUpWindowPair();
  auto inbox = Register(b_.pd, 64);
  ibv_sge r{inbox->addr(), 64, inbox->mr->lkey};
  ASSERT_EQ(PostRecv(b_.qp, 7, &r, 1), 0);
  ibv_sge s{source_->addr(), 16, source_->mr->lkey};
  ASSERT_EQ(PostInvalidate(a_.qp, IBV_WR_SEND_WITH_INV, mw_->rkey, &s, 1), 0);  // never bound
  EXPECT_EQ(OneStatus(a_.send_cq), IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(OneStatus(b_.recv_cq), IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(QpState(b_.qp), IBV_QPS_ERR);
}

TEST_F(MemoryWindowTest, StaleRkeyAfterRebindFails) {
  SetUpWindowPair();
  uint32_t first = BindMiddlePage();
  ASSERT_EQ(PostInvalidate(b_.qp, IBV_WR_LOCAL_INV, first), 0);
  EXPECT_EQ(OneStatus(b_.send_cq), IBV_WC_SUCCESS);
  uint32_t second = BindMiddlePage();
  EXPECT_NE(first, second);
  EXPECT_EQ(first & ~0xffu, second & ~0xffu) << "same window index, new tag";
  EXPECT_EQ(WriteAt(kWindowOffset, 64, second), IBV_WC_SUCCESS);
  EXPECT_EQ(WriteAt(kWindowOffset + 64, 64, first), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RangeCopied(kWindowOffset, 64));
  EXPECT_TRUE(RangeIs(kWindowOffset + 64, 64, kSentinel));
}

TEST_F(MemoryWindowTest, ZeroBasedWindowIsAddressedByOffset) {
  SetUpWindowPair();
  uint32_t rkey = BindMiddlePage(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED);
  ibv_sge s{source_->addr(), 64, source_->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, 100, rkey), 0);
  EXPECT_EQ(OneStatus(a_.send_cq), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(target_->data() + kWindowOffset + 100, source_->data(), 64), 0);
  ASSERT_EQ(
      PostSend(a_.qp, IBV_WR_RDMA_WRITE, 2, &s, 1, IBV_SEND_SIGNALED, kWindowLength - 32, rkey), 0);
  EXPECT_EQ(OneStatus(a_.send_cq), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, WindowServesOnlyTheQpItIsBoundTo) {
  SetUpWindowPair();
  uint32_t rkey = BindMiddlePage();
  // Another connection into the same PD of b: the window is not its to use (type 2B).
  Endpoint c, d;
  c.ctx = a_.ctx;
  d.ctx = b_.ctx;
  CreateQp(c, {});
  d.pd = b_.pd;  // share b's PD so only the QP differs
  d.send_cq = ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0);
  d.recv_cq = ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0);
  ibv_qp_init_attr init{};
  init.send_cq = d.send_cq;
  init.recv_cq = d.recv_cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 8;
  init.cap.max_recv_wr = 8;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  d.qp = ibv_create_qp(b_.pd, &init);
  ASSERT_NE(d.qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(d.qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  ASSERT_EQ(ibv_query_gid(d.ctx, 1, 0, &d.gid), 0);
  ConnectQp(c, d.qp->qp_num, d.gid, {});
  ConnectQp(d, c.qp->qp_num, c.gid, {});
  auto src = Register(c.pd, 3 * kPage);
  EXPECT_EQ(WriteAt(kWindowOffset, 64, rkey, &c, src.get()), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RangeIs(0, 3 * kPage, kSentinel));
  // The window's own QP still may.
  EXPECT_EQ(WriteAt(kWindowOffset, 64, rkey), IBV_WC_SUCCESS);
  src.reset();
  d.pd = nullptr;  // b's
  c.ctx = d.ctx = nullptr;
  DestroyEndpoint(c);
  DestroyEndpoint(d);
}

TEST_F(MemoryWindowTest, BindChecksTheRegionAndTheWindow) {
  SetUpWindowPair();
  // The MR lacks IBV_ACCESS_MW_BIND.
  auto plain = Register(b_.pd, kPage, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(PostBind(b_.qp, mw_, plain->mr, plain->addr(), 64, IBV_ACCESS_REMOTE_WRITE,
                     ibv_inc_rkey(mw_->rkey)),
            0);
  ibv_wc wc{};
  EXPECT_EQ(OneStatus(b_.send_cq, &wc), IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(QpState(b_.qp), IBV_QPS_ERR) << "a failed bind is a local error";
}

TEST_F(MemoryWindowTest, BindRangeMustLieInsideTheRegion) {
  SetUpWindowPair();
  ASSERT_EQ(PostBind(b_.qp, mw_, target_->mr, target_->addr() + 2 * kPage, kPage + 1,
                     IBV_ACCESS_REMOTE_WRITE, ibv_inc_rkey(mw_->rkey)),
            0);
  EXPECT_EQ(OneStatus(b_.send_cq), IBV_WC_MW_BIND_ERR);
}

TEST_F(MemoryWindowTest, BoundWindowMustBeInvalidatedBeforeRebindAndHoldsItsRegion) {
  SetUpWindowPair();
  BindMiddlePage();
  EXPECT_EQ(ibv_dereg_mr(target_->mr), EBUSY) << "ibv_alloc_mw(3): a bound window holds its MR";
  // A type 2 window that is bound cannot be bound again.
  ASSERT_EQ(PostBind(b_.qp, mw_, target_->mr, target_->addr(), 64, IBV_ACCESS_REMOTE_WRITE,
                     ibv_inc_rkey(mw_->rkey)),
            0);
  EXPECT_EQ(OneStatus(b_.send_cq), IBV_WC_MW_BIND_ERR);
  // Deallocating the window unbinds it, and the MR can go.
  EXPECT_EQ(ibv_dealloc_mw(mw_), 0);
  mw_ = nullptr;
  EXPECT_EQ(ibv_dereg_mr(target_->mr), 0);
  target_->mr = nullptr;
}

TEST_F(MemoryWindowTest, BindKeepsTheWindowIndex) {
  SetUpWindowPair();
  ASSERT_EQ(PostBind(b_.qp, mw_, target_->mr, target_->addr(), 64, IBV_ACCESS_REMOTE_WRITE,
                     mw_->rkey + 0x100),
            0);
  EXPECT_EQ(OneStatus(b_.send_cq), IBV_WC_MW_BIND_ERR);
}

TEST_F(MemoryWindowTest, LocalInvalidateOfAStaleKeyFails) {
  SetUpWindowPair();
  uint32_t rkey = BindMiddlePage();
  ASSERT_EQ(PostInvalidate(b_.qp, IBV_WR_LOCAL_INV, ibv_inc_rkey(rkey)), 0);
  ibv_wc wc{};
  EXPECT_EQ(OneStatus(b_.send_cq, &wc), IBV_WC_LOC_QP_OP_ERR);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
}

TEST_F(MemoryWindowTest, PostingABindWithoutATypeTwoWindowIsRefused) {
  SetUpWindowPair();
  EXPECT_EQ(PostBind(b_.qp, nullptr, target_->mr, target_->addr(), 64, IBV_ACCESS_REMOTE_WRITE, 0),
            EINVAL);
}

TEST_F(MemoryWindowTest, DestroyingTheQpFreesItsWindows) {
  SetUpWindowPair();
  BindMiddlePage();
  EXPECT_EQ(ibv_destroy_qp(b_.qp), 0);
  b_.qp = nullptr;
  EXPECT_EQ(ibv_dereg_mr(target_->mr), 0) << "no window is bound any more";
  target_->mr = nullptr;
}

}  // namespace
}  // namespace bx::simnic::testing
