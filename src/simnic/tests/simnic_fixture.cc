#include "simnic_fixture.h"

#include <thread>

namespace bx::simnic::testing {

ibv_context* OpenDevice(const char* name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  EXPECT_NE(list, nullptr);
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  EXPECT_NE(ctx, nullptr) << "no device " << name;
  return ctx;
}

void CreateQp(Endpoint& ep, const QpOptions& o) {
  ep.pd = ibv_alloc_pd(ep.ctx);
  ASSERT_NE(ep.pd, nullptr);
  ep.qp_pd = ep.pd;
  if (o.use_parent_domain) {
    ibv_td_init_attr td_attr{};
    ep.td = ibv_alloc_td(ep.ctx, &td_attr);
    ASSERT_NE(ep.td, nullptr);
    ibv_parent_domain_init_attr pd_attr{};
    pd_attr.pd = ep.pd;
    pd_attr.td = ep.td;
    ep.qp_pd = ibv_alloc_parent_domain(ep.ctx, &pd_attr);
    ASSERT_NE(ep.qp_pd, nullptr);
  }
  const bool extended = o.extended_send_ops != 0;
  if (extended) {
    ibv_cq_init_attr_ex cq_attr{};
    cq_attr.cqe = uint32_t(o.cqe);
    cq_attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    cq_attr.channel = o.send_channel;
    ibv_cq_ex* send_cq = ibv_create_cq_ex(ep.ctx, &cq_attr);
    cq_attr.channel = nullptr;
    ibv_cq_ex* recv_cq = ibv_create_cq_ex(ep.ctx, &cq_attr);
    ASSERT_NE(send_cq, nullptr) << strerror(errno);
    ASSERT_NE(recv_cq, nullptr) << strerror(errno);
    ep.send_cq = ibv_cq_ex_to_cq(send_cq);
    ep.recv_cq = ibv_cq_ex_to_cq(recv_cq);
  } else {
    ep.send_cq = ibv_create_cq(ep.ctx, o.cqe, nullptr, o.send_channel, 0);
    ep.recv_cq = ibv_create_cq(ep.ctx, o.cqe, nullptr, nullptr, 0);
  }
  ASSERT_NE(ep.send_cq, nullptr);
  ASSERT_NE(ep.recv_cq, nullptr);
  ibv_qp_init_attr_ex init{};
  init.send_cq = ep.send_cq;
  init.recv_cq = ep.recv_cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = o.sq_sig_all;
  init.cap.max_send_wr = o.send_wr;
  init.cap.max_recv_wr = o.recv_wr;
  init.cap.max_send_sge = o.max_sge;
  init.cap.max_recv_sge = o.max_sge;
  init.cap.max_inline_data = o.max_inline;
  init.comp_mask = IBV_QP_INIT_ATTR_PD;
  init.pd = ep.qp_pd;
  if (extended) {
    init.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    init.send_ops_flags = o.extended_send_ops;
  }
  ep.qp = ibv_create_qp_ex(ep.ctx, &init);
  ASSERT_NE(ep.qp, nullptr) << strerror(errno);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ASSERT_EQ(ibv_modify_qp(ep.qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  ASSERT_EQ(ibv_query_gid(ep.ctx, 1, 0, &ep.gid), 0);
}

void ConnectQp(Endpoint& ep, uint32_t remote_qpn, const ibv_gid& remote_gid, const QpOptions& o,
               uint32_t sq_psn, uint32_t rq_psn) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_4096;
  attr.dest_qp_num = remote_qpn;
  attr.rq_psn = rq_psn;
  attr.max_dest_rd_atomic = 16;
  attr.min_rnr_timer = o.min_rnr_timer;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.dgid = remote_gid;
  attr.ah_attr.grh.hop_limit = 1;
  attr.ah_attr.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(ep.qp, &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = o.timeout;
  attr.retry_cnt = o.retry_cnt;
  attr.rnr_retry = o.rnr_retry;
  attr.sq_psn = sq_psn;
  attr.max_rd_atomic = 16;
  ASSERT_EQ(ibv_modify_qp(ep.qp, &attr,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
            0);
}

void DestroyEndpoint(Endpoint& ep) {
  if (ep.qp) {
    EXPECT_EQ(ibv_destroy_qp(ep.qp), 0);
  }
  if (ep.send_cq) {
    EXPECT_EQ(ibv_destroy_cq(ep.send_cq), 0);
  }
  if (ep.recv_cq) {
    EXPECT_EQ(ibv_destroy_cq(ep.recv_cq), 0);
  }
  if (ep.qp_pd && ep.qp_pd != ep.pd) {
    EXPECT_EQ(ibv_dealloc_pd(ep.qp_pd), 0);
  }
  if (ep.td) {
    EXPECT_EQ(ibv_dealloc_td(ep.td), 0);
  }
  if (ep.pd) {
    EXPECT_EQ(ibv_dealloc_pd(ep.pd), 0);
  }
  if (ep.ctx) {
    EXPECT_EQ(ibv_close_device(ep.ctx), 0);
  }
  ep = Endpoint{};
}

std::vector<ibv_wc> PollN(ibv_cq* cq, size_t n, std::chrono::milliseconds timeout) {
  std::vector<ibv_wc> out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  ibv_wc wc[32];
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    int got = ibv_poll_cq(cq, int(std::min<size_t>(32, n - out.size())), wc);
    if (got < 0) break;
    out.insert(out.end(), wc, wc + got);
    if (got == 0) std::this_thread::yield();
  }
  return out;
}

std::vector<ibv_wc> Drain(ibv_cq* cq, std::chrono::milliseconds quiet) {
  std::vector<ibv_wc> out;
  auto deadline = std::chrono::steady_clock::now() + quiet;
  ibv_wc wc[32];
  do {  // polls at least once, even with no quiet time
    int got = ibv_poll_cq(cq, 32, wc);
    if (got < 0) break;
    out.insert(out.end(), wc, wc + got);
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < deadline);
  return out;
}

std::unique_ptr<Region> Register(ibv_pd* pd, size_t size, int access) {
  auto r = std::make_unique<Region>();
  r->bytes.resize(size);
  r->mr = ibv_reg_mr(pd, r->bytes.data(), size, access);
  EXPECT_NE(r->mr, nullptr) << strerror(errno);
  return r;
}

void FillRandom(uint8_t* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = uint8_t(rng());
}

int PostSend(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, ibv_sge* sge, int num_sge,
             unsigned flags, uint64_t remote_addr, uint32_t rkey, uint32_t imm) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.send_flags = flags;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  wr.imm_data = imm;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int PostRecv(ibv_qp* qp, uint64_t wr_id, ibv_sge* sge, int num_sge) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

bxsim_device_counters Counters(ibv_context* ctx) {
  bxsim_device_counters c{};
  EXPECT_EQ(bxsim_query_counters(ctx, &c), 0);
  return c;
}

void SimPairTest::SetUp() {
  a_.ctx = OpenDevice("bxsim0");
  b_.ctx = OpenDevice("bxsim1");
}

void SimPairTest::TearDown() {
  DestroyEndpoint(a_);
  DestroyEndpoint(b_);
}

void SimPairTest::Connect(const QpOptions& a_opts, const QpOptions& b_opts) {
  CreateQp(a_, a_opts);
  CreateQp(b_, b_opts);
  ConnectQp(a_, b_.qp->qp_num, b_.gid, a_opts);
  ConnectQp(b_, a_.qp->qp_num, a_.gid, b_opts);
}

}  // namespace bx::simnic::testing
