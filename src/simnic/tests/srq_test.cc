// Shared receive queues: two RC QPs on bxsim1 take their receives from one SRQ, each
// connected to a QP of its own on bxsim0. Receives are consumed in the order posted whichever QP
// receives; an empty SRQ answers RNR; the limit event, the bound on WQEs in use, the error
// state's LAST_WQE_REACHED and the rules of post, modify and destroy are those of the man pages.
#include <poll.h>

#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "simnic_fixture.h"

namespace bx::simnic::testing {
namespace {

constexpr size_t kPairs = 2;
constexpr size_t kSlot = 256;  // bytes per receive buffer

class SrqTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sender_ctx_ = OpenDevice("bxsim0");
    receiver_ctx_ = OpenDevice("bxsim1");
    ASSERT_TRUE(sender_ctx_ && receiver_ctx_);
    sender_pd_ = ibv_alloc_pd(sender_ctx_);
    receiver_pd_ = ibv_alloc_pd(receiver_ctx_);
    sender_cq_ = ibv_create_cq(sender_ctx_, 256, nullptr, nullptr, 0);
    receiver_cq_ = ibv_create_cq(receiver_ctx_, 256, nullptr, nullptr, 0);
    ASSERT_TRUE(sender_pd_ && receiver_pd_ && sender_cq_ && receiver_cq_);
  }

  // The SRQ, and kPairs connected QP pairs whose receiving ends use it.
  void Build(uint32_t srq_max_wr, uint8_t rnr_retry) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = srq_max_wr;
    init.attr.max_sge = 1;
    srq_ = ibv_create_srq(receiver_pd_, &init);
    ASSERT_NE(srq_, nullptr) << strerror(errno);
    QpOptions options;
    options.rnr_retry = rnr_retry;
    for (size_t i = 0; i < kPairs; ++i) {
      senders_[i] = MakeEndpoint(sender_ctx_, sender_pd_, sender_cq_, nullptr);
      receivers_[i] = MakeEndpoint(receiver_ctx_, receiver_pd_, receiver_cq_, srq_);
      ASSERT_TRUE(senders_[i].qp && receivers_[i].qp);
      ConnectQp(senders_[i], receivers_[i].qp->qp_num, receivers_[i].gid, options);
      ConnectQp(receivers_[i], senders_[i].qp->qp_num, senders_[i].gid, options);
    }
    source_ = Register(sender_pd_, kSlot);
    sink_ = Register(receiver_pd_, kSlot * 64);
  }

  Endpoint MakeEndpoint(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq, ibv_srq* srq) {
    Endpoint ep;
    ep.ctx = ctx;
    ep.pd = ep.qp_pd = pd;
    ep.send_cq = ep.recv_cq = cq;
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.srq = srq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 32;
    init.cap.max_recv_wr = 32;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    ep.qp = ibv_create_qp(pd, &init);
    if (ep.qp == nullptr) return ep;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    EXPECT_EQ(ibv_modify_qp(ep.qp, &attr,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    EXPECT_EQ(ibv_query_gid(ctx, 1, 0, &ep.gid), 0);
    return ep;
  }

  // Posts one receive of slot `slot` of the sink, with wr_id = slot.
  int PostSrq(uint64_t slot) {
    ibv_sge sge{sink_->addr() + slot * kSlot, uint32_t(kSlot), sink_->mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq_, &wr, &bad);
  }

  // Sends 16 bytes of `byte` on pair `pair`.
  void Send(size_t pair, uint8_t byte, uint64_t wr_id) {
    std::memset(source_->data(), byte, 16);
    ibv_sge sge{source_->addr(), 16, source_->mr->lkey};
    ASSERT_EQ(PostSend(senders_[pair].qp, IBV_WR_SEND, wr_id, &sge, 1, IBV_SEND_SIGNALED), 0);
    // One send at a time: the source buffer is reused.
    std::vector<ibv_wc> done = PollN(sender_cq_, 1);
    ASSERT_EQ(done.size(), 1u);
    last_send_status_ = done[0].status;
  }

  // The last send succeeded, and its receive completion took the SRQ's WQE `wr_id`.
  void ExpectDelivered(uint64_t wr_id) {
    EXPECT_EQ(last_send_status_, IBV_WC_SUCCESS);
    std::vector<ibv_wc> received = PollN(receiver_cq_, 1);
    ASSERT_EQ(received.size(), 1u);
    EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(received[0].wr_id, wr_id);
  }

  // The next async event of the receiving context within a second, or nullopt.
  std::optional<ibv_async_event> NextEvent() {
    pollfd p{receiver_ctx_->async_fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return std::nullopt;
    ibv_async_event event{};
    if (ibv_get_async_event(receiver_ctx_, &event) != 0) return std::nullopt;
    ibv_ack_async_event(&event);
    return event;
  }

  void TearDown() override {
    for (size_t i = 0; i < kPairs; ++i) {
      for (Endpoint* ep : {&senders_[i], &receivers_[i]}) {
        if (ep->qp) {
          EXPECT_EQ(ibv_destroy_qp(ep->qp), 0);
        }
      }
    }
    if (srq_) {
      EXPECT_EQ(ibv_destroy_srq(srq_), 0);
    }
    source_.reset();
    sink_.reset();
    ibv_destroy_cq(sender_cq_);
    ibv_destroy_cq(receiver_cq_);
    ibv_dealloc_pd(sender_pd_);
    ibv_dealloc_pd(receiver_pd_);
    ibv_close_device(sender_ctx_);
    ibv_close_device(receiver_ctx_);
  }

  ibv_context *sender_ctx_ = nullptr, *receiver_ctx_ = nullptr;
  ibv_pd *sender_pd_ = nullptr, *receiver_pd_ = nullptr;
  ibv_cq *sender_cq_ = nullptr, *receiver_cq_ = nullptr;
  ibv_srq* srq_ = nullptr;
  std::array<Endpoint, kPairs> senders_, receivers_;
  std::unique_ptr<Region> source_, sink_;
  ibv_wc_status last_send_status_ = IBV_WC_SUCCESS;
};

TEST_F(SrqTest, ReceivesAreConsumedInPostOrderWhicheverQpReceives) {
  ASSERT_NO_FATAL_FAILURE(Build(16, 0));
  for (uint64_t slot = 0; slot < 4; ++slot) ASSERT_EQ(PostSrq(slot), 0);
  const size_t pairs[] = {1, 0, 1, 1};
  for (size_t i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(Send(pairs[i], uint8_t(0xa0 + i), i));
  std::vector<ibv_wc> received = PollN(receiver_cq_, 4);
  ASSERT_EQ(received.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(received[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(received[i].wr_id, i) << "the SRQ's receives go in the order posted";
    EXPECT_EQ(received[i].qp_num, receivers_[pairs[i]].qp->qp_num) << "the QP that received";
    EXPECT_EQ(received[i].byte_len, 16u);
    EXPECT_EQ(sink_->data()[i * kSlot], uint8_t(0xa0 + i));
  }
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(receivers_[0].qp, &attr, IBV_QP_CAP, &init), 0);
  EXPECT_EQ(init.srq, srq_);
}

TEST_F(SrqTest, AnEmptySrqAnswersRnrUntilAReceiveIsPosted) {
  ASSERT_NO_FATAL_FAILURE(Build(16, 0));
  ASSERT_NO_FATAL_FAILURE(Send(0, 1, 1));
  EXPECT_EQ(last_send_status_, IBV_WC_RNR_RETRY_EXC_ERR) << "no retries allowed: RNR fails it";
}

TEST_F(SrqTest, WithRnrRetriesASendWaitsForTheNextPostedReceive) {
  ASSERT_NO_FATAL_FAILURE(Build(16, 7));  // retry forever
  std::thread late_post([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(PostSrq(5), 0);
  });
  ASSERT_NO_FATAL_FAILURE(Send(1, 0x55, 1));
  late_post.join();
  ExpectDelivered(5);
}

TEST_F(SrqTest, WqesCountAgainstMaxWrUntilTheirCompletionsArePolled) {
  ASSERT_NO_FATAL_FAILURE(Build(2, 0));
  ibv_srq_attr attr{};
  ASSERT_EQ(ibv_query_srq(srq_, &attr), 0);
  EXPECT_EQ(attr.max_wr, 2u);
  ASSERT_EQ(PostSrq(0), 0);
  ASSERT_EQ(PostSrq(1), 0);
  EXPECT_EQ(PostSrq(2), ENOMEM);
  ASSERT_NO_FATAL_FAILURE(Send(0, 1, 1));
  EXPECT_EQ(PostSrq(2), ENOMEM) << "consumed but not polled: still in use";
  ASSERT_EQ(PollN(receiver_cq_, 1).size(), 1u);
  EXPECT_EQ(PostSrq(2), 0);
  // Resizing: not below what is in use; then up.
  attr.max_wr = 1;
  EXPECT_EQ(ibv_modify_srq(srq_, &attr, IBV_SRQ_MAX_WR), EINVAL);
  attr.max_wr = 4;
  ASSERT_EQ(ibv_modify_srq(srq_, &attr, IBV_SRQ_MAX_WR), 0);
  EXPECT_EQ(PostSrq(3), 0);
  EXPECT_EQ(PostSrq(4), 0);
  EXPECT_EQ(PostSrq(5), ENOMEM);
}

TEST_F(SrqTest, TheLimitEventFiresOnceWhenFewerThanTheLimitRemain) {
  ASSERT_NO_FATAL_FAILURE(Build(16, 0));
  for (uint64_t slot = 0; slot < 4; ++slot) ASSERT_EQ(PostSrq(slot), 0);
  ibv_srq_attr attr{};
  attr.srq_limit = 3;
  ASSERT_EQ(ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT), 0);
  ASSERT_NO_FATAL_FAILURE(Send(0, 1, 1));  // 3 remain: not fewer than 3
  pollfd p{receiver_ctx_->async_fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 50), 0) << "an event before the limit was crossed";
  ASSERT_NO_FATAL_FAILURE(Send(1, 2, 2));  // 2 remain
  std::optional<ibv_async_event> event = NextEvent();
  ASSERT_TRUE(event);
  EXPECT_EQ(event->event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(event->element.srq, srq_);
  ASSERT_EQ(ibv_query_srq(srq_, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 0u) << "the event disarms the limit";
  ASSERT_NO_FATAL_FAILURE(Send(1, 3, 3));
  EXPECT_EQ(poll(&p, 1, 50), 0) << "a second event without re-arming";
  attr.srq_limit = 17;
  EXPECT_EQ(ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT), EINVAL) << "above max_wr";
}

TEST_F(SrqTest, AQpInErrorReportsLastWqeAndFlushesNoneOfTheSrqsReceives) {
  ASSERT_NO_FATAL_FAILURE(Build(16, 0));
  for (uint64_t slot = 0; slot < 3; ++slot) ASSERT_EQ(PostSrq(slot), 0);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(receivers_[0].qp, &attr, IBV_QP_STATE), 0);
  std::optional<ibv_async_event> event = NextEvent();
  ASSERT_TRUE(event);
  EXPECT_EQ(event->event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(event->element.qp, receivers_[0].qp);
  EXPECT_TRUE(Drain(receiver_cq_).empty()) << "SRQ receives were flushed";
  ASSERT_NO_FATAL_FAILURE(Send(1, 9, 1));  // the other QP still receives from it
  ExpectDelivered(0);
}

TEST_F(SrqTest, PostRecvOnAnSrqQpAndDestroyingAnSrqInUseAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Build(16, 0));
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(receivers_[0].qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_EQ(ibv_destroy_srq(srq_), EBUSY);
  ibv_srq_init_attr bad_init{};
  bad_init.attr.max_wr = 0;
  EXPECT_EQ(ibv_create_srq(receiver_pd_, &bad_init), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_device_attr device{};
  ASSERT_EQ(ibv_query_device(receiver_ctx_, &device), 0);
  EXPECT_GT(device.max_srq, 0);
  EXPECT_GT(device.max_srq_wr, 0);
}

}  // namespace
}  // namespace bx::simnic::testing
