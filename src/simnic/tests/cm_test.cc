// The simnic's connection manager (libbx_simnic_cm.so, src/simnic/cm/) against librdmacm's
// documented semantics, both ends in this process: events in the kernel's order with their
// private data, QPs moved to RTS and able to write, REJECTED with the kernel's reasons,
// DISCONNECTED on both sides with the QP in error, the kernel's private data limits.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

// The next event on `channel`, waiting at most 10 s (the fd is pollable, as the kernel's is).
rdma_cm_event* NextEvent(rdma_event_channel* channel) {
  pollfd ready{channel->fd, POLLIN, 0};
  if (poll(&ready, 1, 10'000) != 1) return nullptr;
  rdma_cm_event* event = nullptr;
  return rdma_get_cm_event(channel, &event) == 0 ? event : nullptr;
}

// Takes the next event, checks its type, and returns (a copy of) its private data and status.
struct Seen {
  rdma_cm_id* id = nullptr;
  int status = 0;
  std::string private_data;
  uint8_t responder_resources = 0, initiator_depth = 0;
};
Seen Expect(rdma_event_channel* channel, rdma_cm_event_type type) {
  rdma_cm_event* event = NextEvent(channel);
  EXPECT_NE(event, nullptr) << "no event within 10 s, expected " << rdma_event_str(type);
  if (event == nullptr) return {};
  EXPECT_EQ(event->event, type) << rdma_event_str(event->event) << " status " << event->status;
  Seen seen{event->id,
            event->status,
            {},
            event->param.conn.responder_resources,
            event->param.conn.initiator_depth};
  if (event->param.conn.private_data_len > 0 && event->param.conn.private_data != nullptr) {
    seen.private_data.assign(static_cast<const char*>(event->param.conn.private_data),
                             event->param.conn.private_data_len);
  }
  rdma_ack_cm_event(event);
  return seen;
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  return address;
}

class CmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    channel_ = rdma_create_event_channel();
    ASSERT_NE(channel_, nullptr);
    ASSERT_EQ(rdma_create_id(channel_, &listener_, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in any = Loopback(0);
    ASSERT_EQ(rdma_bind_addr(listener_, reinterpret_cast<sockaddr*>(&any)), 0);
    ASSERT_EQ(rdma_listen(listener_, 4), 0);
    port_ = ntohs(rdma_get_src_port(listener_));
    ASSERT_NE(port_, 0) << "port 0 asks the CM for a free port";
  }
  void TearDown() override {
    for (rdma_cm_id* id : {client_, server_}) {
      if (id == nullptr) continue;
      if (id->qp != nullptr) rdma_destroy_qp(id);
      rdma_destroy_id(id);
    }
    if (listener_ != nullptr) rdma_destroy_id(listener_);
    if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
  }

  // A client id with its address and route resolved and an RC QP.
  void ResolveClient(uint16_t port) {
    ASSERT_EQ(rdma_create_id(channel_, &client_, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in server = Loopback(port);
    ASSERT_EQ(rdma_resolve_addr(client_, nullptr, reinterpret_cast<sockaddr*>(&server), 2000), 0);
    Expect(channel_, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_NE(client_->verbs, nullptr) << "resolving binds the id to a device";
    ASSERT_EQ(rdma_resolve_route(client_, 2000), 0);
    Expect(channel_, RDMA_CM_EVENT_ROUTE_RESOLVED);
    CreateQp(client_);
  }
  static void CreateQp(rdma_cm_id* id) {
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 8;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    attr.sq_sig_all = 1;
    ASSERT_EQ(rdma_create_qp(id, nullptr, &attr), 0) << strerror(errno);
    ASSERT_NE(id->qp, nullptr);
    ASSERT_NE(id->send_cq, nullptr) << "CQs of its own when none were given";
  }
  static ibv_qp_state QpState(rdma_cm_id* id) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(ibv_query_qp(id->qp, &attr, IBV_QP_STATE, &init), 0);
    return attr.qp_state;
  }
  // Client connects with `hello`; the server takes the request and accepts with `welcome`.
  void Connect(const std::string& hello, const std::string& welcome) {
    ResolveClient(port_);
    rdma_conn_param param{};
    param.private_data = hello.data();
    param.private_data_len = uint8_t(hello.size());
    param.responder_resources = param.initiator_depth = 4;
    param.retry_count = param.rnr_retry_count = 7;
    ASSERT_EQ(rdma_connect(client_, &param), 0);
    Seen request = Expect(channel_, RDMA_CM_EVENT_CONNECT_REQUEST);
    EXPECT_EQ(request.private_data, hello);
    EXPECT_EQ(request.initiator_depth, 4);
    server_ = request.id;
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(server_, listener_) << "a request comes on an id of its own";
    CreateQp(server_);
    rdma_conn_param reply{};
    reply.private_data = welcome.data();
    reply.private_data_len = uint8_t(welcome.size());
    reply.responder_resources = reply.initiator_depth = 4;
    ASSERT_EQ(rdma_accept(server_, &reply), 0);
    // Both establish, in either order on the shared channel.
    Seen first = Expect(channel_, RDMA_CM_EVENT_ESTABLISHED);
    Seen second = Expect(channel_, RDMA_CM_EVENT_ESTABLISHED);
    const Seen& at_client = first.id == client_ ? first : second;
    EXPECT_EQ(at_client.id, client_);
    EXPECT_EQ(at_client.private_data, welcome);
  }

  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* listener_ = nullptr;
  rdma_cm_id* client_ = nullptr;
  rdma_cm_id* server_ = nullptr;
  uint16_t port_ = 0;
};

TEST_F(CmTest, ConnectsBothQpsToRtsAndAnRdmaWriteLands) {
  Connect("hello from the client", "welcome");
  EXPECT_EQ(QpState(client_), IBV_QPS_RTS);
  EXPECT_EQ(QpState(server_), IBV_QPS_RTS);
  EXPECT_EQ(ntohs(rdma_get_dst_port(client_)), port_);

  std::vector<char> source(4096, 'x'), target(4096, 0);
  // (ints: verbs.h's ibv_reg_mr macro masks the flags with an enum of another type)
  const int local = IBV_ACCESS_LOCAL_WRITE;
  const int remote = local | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* source_mr = ibv_reg_mr(client_->pd, source.data(), source.size(), local);
  ibv_mr* target_mr = ibv_reg_mr(server_->pd, target.data(), target.size(), remote);
  ASSERT_NE(source_mr, nullptr);
  ASSERT_NE(target_mr, nullptr);
  ibv_sge sge{reinterpret_cast<uintptr_t>(source.data()), uint32_t(source.size()), source_mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(target.data());
  wr.wr.rdma.rkey = target_mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(client_->qp, &wr, &bad), 0);
  ibv_wc wc{};
  for (int polls = 0; polls < 10'000'000 && ibv_poll_cq(client_->send_cq, 1, &wc) == 0; ++polls) {
  }
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(target, source);
  ibv_dereg_mr(source_mr);
  ibv_dereg_mr(target_mr);
}

TEST_F(CmTest, DisconnectReachesBothSidesAndPutsTheQpInError) {
  Connect("a", "b");
  ASSERT_EQ(rdma_disconnect(client_), 0);
  EXPECT_EQ(QpState(client_), IBV_QPS_ERR) << "rdma_disconnect moves the QP to error";
  Seen first = Expect(channel_, RDMA_CM_EVENT_DISCONNECTED);
  Seen second = Expect(channel_, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_TRUE((first.id == client_ && second.id == server_) ||
              (first.id == server_ && second.id == client_));
  EXPECT_EQ(rdma_disconnect(server_), 0) << "after the peer's: nothing more to do, no error";
}

TEST_F(CmTest, NothingListeningIsRejectedWithInvalidServiceId) {
  rdma_destroy_id(listener_);  // its port is free again
  listener_ = nullptr;
  ResolveClient(port_);
  ASSERT_EQ(rdma_connect(client_, nullptr), 0) << "the refusal comes as an event";
  Seen rejected = Expect(channel_, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(rejected.status, 8) << "IB_CM_REJ_INVALID_SERVICE_ID, as the kernel reports it";
}

TEST_F(CmTest, ARejectReachesTheClientWithItsPrivateData) {
  ResolveClient(port_);
  ASSERT_EQ(rdma_connect(client_, nullptr), 0);
  server_ = Expect(channel_, RDMA_CM_EVENT_CONNECT_REQUEST).id;
  const std::string why = "full, try later";
  ASSERT_EQ(rdma_reject(server_, why.data(), uint8_t(why.size())), 0);
  Seen rejected = Expect(channel_, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(rejected.id, client_);
  EXPECT_EQ(rejected.status, 28) << "IB_CM_REJ_CONSUMER_DEFINED";
  EXPECT_EQ(rejected.private_data, why);
}

TEST_F(CmTest, PrivateDataBeyondTheKernelsLimitsIsRefused) {
  ResolveClient(port_);
  std::string too_long(57, 'r');  // a REQ carries 56 bytes on RDMA_PS_TCP
  rdma_conn_param param{};
  param.private_data = too_long.data();
  param.private_data_len = uint8_t(too_long.size());
  errno = 0;
  EXPECT_EQ(rdma_connect(client_, &param), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(CmTest, APortTakenByAnotherIdCannotBeBound) {
  rdma_cm_id* second = nullptr;
  ASSERT_EQ(rdma_create_id(channel_, &second, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in same = Loopback(port_);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(second, reinterpret_cast<sockaddr*>(&same)), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  rdma_destroy_id(second);
}

TEST_F(CmTest, UnsupportedPortSpacesAndFeaturesFailClearly) {
  rdma_cm_id* udp = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_create_id(channel_, &udp, nullptr, RDMA_PS_UDP), -1);
  EXPECT_EQ(errno, EPROTONOSUPPORT) << "RC only: no UD service lookup";
  sockaddr_in group = Loopback(0);
  errno = 0;
  EXPECT_EQ(rdma_join_multicast(listener_, reinterpret_cast<sockaddr*>(&group), nullptr), -1);
  EXPECT_EQ(errno, ENOSYS);
}

}  // namespace
