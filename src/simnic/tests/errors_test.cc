// Error semantics: receiver-not-ready and its retry limit, access and protection errors, flush on
// error, PSN mismatch, link down, a vanished peer, forced QP errors, queue-full and CQ overrun.
#include <poll.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "simnic_fixture.h"

namespace bx::simnic::testing {
namespace {

using ErrorTest = SimPairTest;

TEST_F(ErrorTest, RnrRetriesThenFailsWithRetryExceeded) {
  QpOptions a;
  a.rnr_retry = 2;
  QpOptions b;
  b.min_rnr_timer = 1;  // 10 us between retries
  Connect(a, b);
  auto src = Register(a_.pd, 64);
  auto before = Counters(b_.ctx);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, 1, &s, 1, 0), 0);  // unsignalled: errors still complete
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, 2, &s, 1, 0), 0);
  auto wc = PollN(a_.send_cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc[1].wr_id, 2u);
  auto after = Counters(b_.ctx);
  EXPECT_EQ(after.rnr_naks - before.rnr_naks, 3u) << "one try plus rnr_retry = 2 retries";
  EXPECT_GE(Counters(a_.ctx).rnr_retry_exceeded, 1u);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(a_.qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
}

TEST_F(ErrorTest, InfiniteRnrRetryWaitsForAReceive) {
  QpOptions a;
  a.rnr_retry = 7;
  Connect(a, {});
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  const uint64_t naks_before = Counters(b_.ctx).rnr_naks;
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, 1, &s, 1, IBV_SEND_SIGNALED), 0);
  // Until the responder has NAKed the send at least once (the device's thread runs when the
  // machine lets it).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (Counters(b_.ctx).rnr_naks == naks_before && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(Counters(b_.ctx).rnr_naks, naks_before);
  EXPECT_TRUE(Drain(a_.send_cq, std::chrono::milliseconds(30)).empty()) << "still retrying";
  ibv_sge r{dst->addr(), 64, dst->mr->lkey};
  ASSERT_EQ(PostRecv(b_.qp, 1, &r, 1), 0);
  auto wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(PollN(b_.recv_cq, 1).size(), 1u);
}

TEST_F(ErrorTest, BadRkeyIsRemoteAccessErrorAndBothQpsFail) {
  Connect();
  auto src = Register(a_.pd, 4096);
  auto dst = Register(b_.pd, 4096);
  ibv_sge r{dst->addr(), 64, dst->mr->lkey};
  ASSERT_EQ(PostRecv(b_.qp, 9, &r, 1), 0);
  ibv_sge s{src->addr(), 64, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, dst->addr(),
                     dst->mr->rkey + 1),
            0);
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 2, &s, 1, 0, dst->addr(), dst->mr->rkey), 0);
  auto wc = PollN(a_.send_cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  // The responder's QP went to error as well: its receive is flushed.
  auto rw = PollN(b_.recv_cq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(rw[0].wr_id, 9u);
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(b_.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(ev.element.qp, b_.qp);
  ibv_ack_async_event(&ev);
}

TEST_F(ErrorTest, AccessRightsAndBoundsAreChecked) {
  struct Case {
    ibv_wr_opcode op;
    int remote_access;
    uint64_t offset;
    uint32_t length;
  };
  const Case cases[] = {
      {IBV_WR_RDMA_WRITE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 0, 64},      // no write
      {IBV_WR_RDMA_READ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0, 64},      // no read
      {IBV_WR_RDMA_WRITE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 4000, 97},  // past end
  };
  for (const Case& c : cases) {
    Connect();
    auto src = Register(a_.pd, 4096);
    auto dst = Register(b_.pd, 4096, c.remote_access);
    ibv_sge s{src->addr(), c.length, src->mr->lkey};
    ASSERT_EQ(
        PostSend(a_.qp, c.op, 1, &s, 1, IBV_SEND_SIGNALED, dst->addr() + c.offset, dst->mr->rkey),
        0);
    auto wc = PollN(a_.send_cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR) << "opcode " << c.op;
    src.reset();
    dst.reset();
    ibv_context* ca = a_.ctx;
    ibv_context* cb = b_.ctx;
    a_.ctx = b_.ctx = nullptr;
    DestroyEndpoint(a_);
    DestroyEndpoint(b_);
    a_.ctx = ca;
    b_.ctx = cb;
  }
}

TEST_F(ErrorTest, BadLkeyIsLocalProtectionError) {
  Connect();
  auto src = Register(a_.pd, 4096);
  auto dst = Register(b_.pd, 4096);
  ibv_sge s{src->addr() + 4000, 200, src->mr->lkey};  // runs past the MR
  ASSERT_EQ(
      PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, dst->addr(), dst->mr->rkey),
      0);
  auto wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(ErrorTest, ModifyToErrorFlushesEverything) {
  Connect();
  auto dst = Register(b_.pd, 4096);
  for (int i = 0; i < 5; ++i) {
    ibv_sge r{dst->addr(), 64, dst->mr->lkey};
    ASSERT_EQ(PostRecv(b_.qp, uint64_t(i), &r, 1), 0);
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(b_.qp, &attr, IBV_QP_STATE), 0);
  auto wc = PollN(b_.recv_cq, 5);
  ASSERT_EQ(wc.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(wc[size_t(i)].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc[size_t(i)].wr_id, uint64_t(i));
  }
  // Work posted to a QP in error is flushed too, even unsignalled sends.
  ibv_sge r{dst->addr(), 64, dst->mr->lkey};
  ASSERT_EQ(PostRecv(b_.qp, 99, &r, 1), 0);
  ASSERT_EQ(PostSend(b_.qp, IBV_WR_SEND, 98, &r, 1, 0), 0);
  auto late = PollN(b_.recv_cq, 1);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].wr_id, 99u);
  EXPECT_EQ(late[0].status, IBV_WC_WR_FLUSH_ERR);
  auto late_send = PollN(b_.send_cq, 1);
  ASSERT_EQ(late_send.size(), 1u);
  EXPECT_EQ(late_send[0].wr_id, 98u);
  EXPECT_EQ(late_send[0].status, IBV_WC_WR_FLUSH_ERR);
  // And the peer finds out through its transport retries when it next sends.
  auto src = Register(a_.pd, 64);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, 1, &s, 1, IBV_SEND_SIGNALED), 0);
  auto sw = PollN(a_.send_cq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(ErrorTest, PsnMismatchIsDroppedUntilRetriesRunOut) {
  QpOptions o;
  o.timeout = 4;  // ~65 us
  o.retry_cnt = 2;
  CreateQp(a_, o);
  CreateQp(b_, o);
  ConnectQp(a_, b_.qp->qp_num, b_.gid, o, /*sq_psn=*/100, 0);
  ConnectQp(b_, a_.qp->qp_num, a_.gid, o, 0, /*rq_psn=*/200);
  auto dst = Register(b_.pd, 64);
  ibv_sge r{dst->addr(), 64, dst->mr->lkey};
  ASSERT_EQ(PostRecv(b_.qp, 1, &r, 1), 0);
  auto src = Register(a_.pd, 64);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, 1, &s, 1, IBV_SEND_SIGNALED), 0);
  auto wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(Drain(b_.recv_cq).empty()) << "nothing was delivered out of sequence";
}

TEST_F(ErrorTest, LinkDownFailsSendsAndReportsPortEvents) {
  Connect();
  auto src = Register(a_.pd, 64);
  ASSERT_EQ(bxsim_set_link(b_.ctx, 0), 0);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(b_.ctx, 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_DOWN);
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(b_.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
  ibv_ack_async_event(&ev);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED), 0);
  auto wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  ASSERT_EQ(bxsim_set_link(b_.ctx, 1), 0);
  ASSERT_EQ(ibv_get_async_event(b_.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
}

TEST_F(ErrorTest, LinkComingBackBeforeRetriesRunOutResumes) {
  QpOptions o;
  // ~268 ms per retry, 7 retries: ~2 s before the send fails, far beyond the link's short
  // outage even when this thread is descheduled for a while.
  o.timeout = 16;
  o.retry_cnt = 7;
  Connect(o, o);
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  FillRandom(src->data(), 64, 1);
  ASSERT_EQ(bxsim_set_link(b_.ctx, 0), 0);
  ibv_sge s{src->addr(), 64, src->mr->lkey};
  ASSERT_EQ(
      PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED, dst->addr(), dst->mr->rkey),
      0);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(bxsim_set_link(b_.ctx, 1), 0);
  auto wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(src->data(), dst->data(), 64));
}

TEST_F(ErrorTest, ForcedQpErrorFailsBothEndsWithFatalEvent) {
  Connect();
  auto dst = Register(b_.pd, 64);
  ibv_sge r{dst->addr(), 64, dst->mr->lkey};
  ASSERT_EQ(PostRecv(a_.qp, 1, &r, 0), 0);
  ASSERT_EQ(PostRecv(b_.qp, 2, &r, 1), 0);
  ASSERT_EQ(bxsim_force_qp_error(a_.qp), 0);
  auto wa = PollN(a_.recv_cq, 1);
  auto wb = PollN(b_.recv_cq, 1);
  ASSERT_EQ(wa.size(), 1u);
  ASSERT_EQ(wb.size(), 1u);
  EXPECT_EQ(wa[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wb[0].status, IBV_WC_WR_FLUSH_ERR);
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(a_.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, a_.qp);
}

TEST_F(ErrorTest, VanishedPeerIsFoundByRetries) {
  Connect();
  auto src = Register(a_.pd, 64);
  ASSERT_EQ(bxsim_vanish(b_.ctx), 0);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED), 0);
  auto wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  ASSERT_EQ(bxsim_set_link(b_.ctx, 1), 0);  // the host comes back for the tests that follow
}

TEST_F(ErrorTest, SendQueueDepthIsEnforcedUntilCompletionsArePolled) {
  QpOptions o;
  o.send_wr = 4;
  o.recv_wr = 2;
  Connect(o, o);
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, uint64_t(i), &s, 1, 0, dst->addr(), dst->mr->rkey),
              0);
  ASSERT_EQ(
      PostSend(a_.qp, IBV_WR_RDMA_WRITE, 3, &s, 1, IBV_SEND_SIGNALED, dst->addr(), dst->mr->rkey),
      0);
  // Full: the slots stay occupied until the signalled completion is polled, even though the
  // hardware has finished with all four.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 4, &s, 1, 0, dst->addr(), dst->mr->rkey), ENOMEM);
  auto wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 3u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(
        PostSend(a_.qp, IBV_WR_RDMA_WRITE, uint64_t(10 + i), &s, 1, 0, dst->addr(), dst->mr->rkey),
        0);
  EXPECT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 20, &s, 1, 0, dst->addr(), dst->mr->rkey), ENOMEM);
  // A chain stops at the first failing request and reports it.
  ibv_recv_wr wrs[3]{};
  for (int i = 0; i < 3; ++i) {
    wrs[i].wr_id = uint64_t(i);
    wrs[i].next = i < 2 ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(b_.qp, wrs, &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[2]);
  // Four unsignalled writes may still be moving data into dst: stop the QP (the hardware steps
  // aside before modify_qp returns) before the buffers are freed, as an application must.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(a_.qp, &attr, IBV_QP_STATE), 0);
}

// A receive-only QP (max_send_wr = 0), which hardware accepts: it receives; every
// send is refused at post with ENOMEM (a full send queue), and nothing reaches the wire.
TEST_F(ErrorTest, AReceiveOnlyQpReceivesAndRefusesEverySend) {
  QpOptions sender, receiver;
  receiver.send_wr = 0;
  Connect(sender, receiver);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(b_.qp, &attr, IBV_QP_CAP, &init), 0);
  EXPECT_EQ(attr.cap.max_send_wr, 0u);
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  FillRandom(src->data(), 64, 7);
  ibv_sge r{dst->addr(), 64, dst->mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 42;
  rwr.sg_list = &r;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_recv = nullptr;
  ASSERT_EQ(ibv_post_recv(b_.qp, &rwr, &bad_recv), 0);
  ibv_sge s{src->addr(), 64, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, 1, &s, 1, IBV_SEND_SIGNALED, 0, 0), 0);
  auto received = PollN(b_.recv_cq, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(received[0].wr_id, 42u);
  EXPECT_EQ(std::memcmp(src->data(), dst->data(), 64), 0);
  ASSERT_EQ(PollN(a_.send_cq, 1).size(), 1u);
  ibv_sge back{dst->addr(), 8, dst->mr->lkey};
  EXPECT_EQ(PostSend(b_.qp, IBV_WR_SEND, 2, &back, 1, IBV_SEND_SIGNALED, 0, 0), ENOMEM);
  EXPECT_TRUE(Drain(b_.send_cq).empty());
  EXPECT_TRUE(Drain(a_.recv_cq).empty()) << "a refused send reached the peer";
}

TEST_F(ErrorTest, CqOverrunBreaksTheCqAndRaisesAnEvent) {
  QpOptions o;
  o.cqe = 2;
  o.sq_sig_all = 1;
  Connect(o, o);
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, uint64_t(i), &s, 1, 0, dst->addr(), dst->mr->rkey),
              0);
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(a_.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, a_.send_cq);
  ibv_wc wc[4];
  EXPECT_LT(ibv_poll_cq(a_.send_cq, 4, wc), 0);
  EXPECT_GE(Counters(a_.ctx).cq_overruns, 1u);
}

TEST_F(ErrorTest, InvalidRequestsAreRejectedAtPost) {
  Connect();
  auto src = Register(a_.pd, 64);
  ibv_sge s[8];
  for (auto& e : s) e = {src->addr(), 1, src->mr->lkey};
  EXPECT_EQ(PostSend(a_.qp, IBV_WR_SEND, 1, s, 8, 0), EINVAL) << "more SGEs than max_send_sge";
  EXPECT_EQ(PostSend(a_.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, s, 1, 0), EINVAL)
      << "atomics are not supported and say so";
  // A QP not yet in RTS does not take sends.
  QpOptions o;
  Endpoint c;
  c.ctx = OpenDevice("bxsim0");
  CreateQp(c, o);
  EXPECT_EQ(PostSend(c.qp, IBV_WR_SEND, 1, s, 1, 0), EINVAL);
  DestroyEndpoint(c);
}

}  // namespace
}  // namespace bx::simnic::testing
