// UD queue pairs: datagrams addressed by an address handle, one MTU each, received after a
// 40-byte GRH, dropped without a word to the sender when nobody takes them.
#include <endian.h>

#include "simnic_fixture.h"

namespace bx::simnic::testing {
namespace {

constexpr uint32_t kUdQkey = 0x11111111;
constexpr uint32_t kUdGrhBytes = 40;  // a UD receive buffer starts with room for the GRH

struct UdEndpoint {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_gid gid{};
  std::unique_ptr<Region> buffer;
};

class DatagramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Open(a_, "bxsim0");
    Open(b_, "bxsim1");
    ibv_port_attr port{};
    ASSERT_EQ(ibv_query_port(a_.ctx, 1, &port), 0);
    mtu_ = 128u << unsigned(port.active_mtu);
    ah_to_b_ = AddressOf(a_, b_.gid);
  }
  void TearDown() override {
    if (ah_to_b_ != nullptr) ibv_destroy_ah(ah_to_b_);
    for (UdEndpoint* ep : {&a_, &b_}) {
      ep->buffer.reset();
      if (ep->qp != nullptr) ibv_destroy_qp(ep->qp);
      if (ep->cq != nullptr) ibv_destroy_cq(ep->cq);
      if (ep->pd != nullptr) ibv_dealloc_pd(ep->pd);
      if (ep->ctx != nullptr) ibv_close_device(ep->ctx);
    }
  }

  static void Open(UdEndpoint& ep, const char* name) {
    ep.ctx = OpenDevice(name);
    ASSERT_NE(ep.ctx, nullptr);
    ep.pd = ibv_alloc_pd(ep.ctx);
    ep.cq = ibv_create_cq(ep.ctx, 64, nullptr, nullptr, 0);
    ASSERT_NE(ep.cq, nullptr);
    ibv_qp_init_attr init{};
    init.send_cq = ep.cq;
    init.recv_cq = ep.cq;
    init.qp_type = IBV_QPT_UD;
    init.cap.max_send_wr = 16;
    init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 2;
    ep.qp = ibv_create_qp(ep.pd, &init);
    ASSERT_NE(ep.qp, nullptr) << strerror(errno);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qkey = kUdQkey;
    ASSERT_EQ(
        ibv_modify_qp(ep.qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
        0);
    attr.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(ibv_modify_qp(ep.qp, &attr, IBV_QP_STATE), 0);
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = 0;
    ASSERT_EQ(ibv_modify_qp(ep.qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    ASSERT_EQ(ibv_query_gid(ep.ctx, 1, 0, &ep.gid), 0);
    ep.buffer = Register(ep.pd, 16384, IBV_ACCESS_LOCAL_WRITE);
  }

  static ibv_ah* AddressOf(UdEndpoint& from, const ibv_gid& to) {
    ibv_ah_attr attr{};
    attr.is_global = 1;
    attr.grh.dgid = to;
    attr.grh.sgid_index = 0;
    attr.grh.hop_limit = 64;
    attr.port_num = 1;
    ibv_ah* ah = ibv_create_ah(from.pd, &attr);
    EXPECT_NE(ah, nullptr) << strerror(errno);
    return ah;
  }

  // Sends `length` bytes from the start of `from`'s buffer, signalled.
  static int Send(UdEndpoint& from, ibv_ah* ah, uint32_t remote_qpn, uint32_t length,
                  uint32_t qkey = kUdQkey, ibv_wr_opcode opcode = IBV_WR_SEND, uint32_t imm = 0) {
    ibv_sge sge{from.buffer->addr(), length, from.buffer->mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 7;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = imm;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = remote_qpn;
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(from.qp, &wr, &bad);
  }

  // Posts a receive of `length` bytes at `offset` in the endpoint's buffer.
  static void Receive(UdEndpoint& ep, uint64_t wr_id, uint32_t length, uint64_t offset = 8192) {
    ibv_sge sge{ep.buffer->addr() + offset, length, ep.buffer->mr->lkey};
    ASSERT_EQ(PostRecv(ep.qp, wr_id, &sge, 1), 0);
  }

  UdEndpoint a_, b_;
  uint32_t mtu_ = 0;
  ibv_ah* ah_to_b_ = nullptr;
};

TEST_F(DatagramTest, ArrivesAfterItsGrhAndTheReplyGoesBackThroughAnAhFromTheCompletion) {
  FillRandom(a_.buffer->data(), 1000, 11);
  Receive(b_, 41, kUdGrhBytes + 1000);
  ASSERT_EQ(Send(a_, ah_to_b_, b_.qp->qp_num, 1000, kUdQkey, IBV_WR_SEND_WITH_IMM, htobe32(99)), 0);
  auto sent = PollN(a_.cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sent[0].opcode, IBV_WC_SEND);

  auto got = PollN(b_.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  const ibv_wc& wc = got[0];
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 41u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, kUdGrhBytes + 1000);  // the GRH counts
  EXPECT_EQ(wc.src_qp, a_.qp->qp_num);
  EXPECT_EQ(wc.wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM), unsigned(IBV_WC_GRH | IBV_WC_WITH_IMM));
  EXPECT_EQ(be32toh(wc.imm_data), 99u);
  const uint8_t* landed = b_.buffer->data() + 8192;
  ibv_grh grh;
  std::memcpy(&grh, landed, sizeof(grh));
  EXPECT_EQ(be32toh(grh.version_tclass_flow) >> 28, 6u);
  EXPECT_EQ(std::memcmp(grh.sgid.raw, a_.gid.raw, 16), 0);
  EXPECT_EQ(std::memcmp(grh.dgid.raw, b_.gid.raw, 16), 0);
  EXPECT_EQ(std::memcmp(landed + kUdGrhBytes, a_.buffer->data(), 1000), 0);

  // The way back, as ibv_ud_pingpong's server finds it: from the completion and the GRH.
  ibv_ah* back = ibv_create_ah_from_wc(b_.pd, const_cast<ibv_wc*>(&wc),
                                       reinterpret_cast<ibv_grh*>(b_.buffer->data() + 8192), 1);
  ASSERT_NE(back, nullptr) << strerror(errno);
  FillRandom(b_.buffer->data(), 64, 12);
  Receive(a_, 42, kUdGrhBytes + 64);
  ASSERT_EQ(Send(b_, back, wc.src_qp, 64), 0);
  auto reply = PollN(a_.cq, 1);
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_EQ(reply[0].wr_id, 42u);
  EXPECT_EQ(reply[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(a_.buffer->data() + 8192 + kUdGrhBytes, b_.buffer->data(), 64), 0);
  PollN(b_.cq, 1);
  ibv_destroy_ah(back);
}

TEST_F(DatagramTest, OneWithAnotherQkeyOrNoReceiveIsDroppedAndTheSenderIsNotTold) {
  const uint64_t dropped = Counters(b_.ctx).datagrams_dropped;
  Receive(b_, 1, kUdGrhBytes + 64);
  // Another Q_Key: sent, not received.
  ASSERT_EQ(Send(a_, ah_to_b_, b_.qp->qp_num, 64, kUdQkey + 1), 0);
  auto sent = PollN(a_.cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(Drain(b_.cq).empty());
  EXPECT_EQ(Counters(b_.ctx).datagrams_dropped, dropped + 1);
  // The receive is still there: the next datagram with the right key takes it.
  ASSERT_EQ(Send(a_, ah_to_b_, b_.qp->qp_num, 64), 0);
  ASSERT_EQ(PollN(b_.cq, 1).size(), 1u);
  // No receive posted: dropped, where RC would have answered with an RNR NAK.
  ASSERT_EQ(Send(a_, ah_to_b_, b_.qp->qp_num, 64), 0);
  auto completions = PollN(a_.cq, 2);
  ASSERT_EQ(completions.size(), 2u);
  EXPECT_EQ(completions[1].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(Drain(b_.cq).empty());
  EXPECT_EQ(Counters(b_.ctx).datagrams_dropped, dropped + 2);
  // No such QP: dropped too.
  ASSERT_EQ(Send(a_, ah_to_b_, 0xabcdef, 64), 0);
  EXPECT_EQ(PollN(a_.cq, 1).at(0).status, IBV_WC_SUCCESS);
  EXPECT_EQ(Counters(b_.ctx).datagrams_dropped, dropped + 3);
}

TEST_F(DatagramTest, AQkeyWithItsTopBitSetSendsTheQpsOwn) {
  Receive(b_, 1, kUdGrhBytes + 64);
  ASSERT_EQ(Send(a_, ah_to_b_, b_.qp->qp_num, 64, 0x80000000u), 0);
  auto got = PollN(b_.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
}

TEST_F(DatagramTest, OneLongerThanTheMtuFailsItsSendWithALocalLengthError) {
  Receive(b_, 1, kUdGrhBytes + mtu_ + 1, 0);
  ASSERT_EQ(Send(a_, ah_to_b_, b_.qp->qp_num, mtu_ + 1), 0);
  auto sent = PollN(a_.cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_TRUE(Drain(b_.cq).empty());
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(a_.qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
  EXPECT_EQ(init.qp_type, IBV_QPT_UD);
}

TEST_F(DatagramTest, AReceiveWithoutRoomForGrhAndPayloadFailsWithALocalLengthError) {
  Receive(b_, 1, 100);  // 40 + 64 bytes do not fit
  ASSERT_EQ(Send(a_, ah_to_b_, b_.qp->qp_num, 64), 0);
  auto got = PollN(b_.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_LOC_LEN_ERR);
}

TEST_F(DatagramTest, RemoteAccessIsNotADatagramsAndTheQkeyIsNeededForInit) {
  ibv_sge sge{a_.buffer->addr(), 8, a_.buffer->mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.ud.ah = ah_to_b_;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(a_.qp, &wr, &bad), EINVAL);
  wr.opcode = IBV_WR_SEND;
  wr.wr.ud.ah = nullptr;  // a datagram needs its address
  EXPECT_EQ(ibv_post_send(a_.qp, &wr, &bad), EINVAL);

  ibv_qp_init_attr init{};
  init.send_cq = a_.cq;
  init.recv_cq = a_.cq;
  init.qp_type = IBV_QPT_UD;
  init.cap.max_send_wr = init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(a_.pd, &init);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), EINVAL);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

}  // namespace
}  // namespace bx::simnic::testing
