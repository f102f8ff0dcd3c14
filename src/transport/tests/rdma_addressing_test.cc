// How rdma:// connections are addressed (verbs/port_address.h): random first PSNs carried in
// the Hello, and the traffic class, service level and path the QPs are given. Runs on whatever
// simnic profile the process has (BX_SIM_PROFILE; ctest runs it on roce and ib as well).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>

#include "bx/simnic.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tests/transports_under_test.h"
#include "verbs/verbs.h"

namespace bx::rdma {
namespace {

using namespace std::chrono_literals;
using transport::testing::InfoOf;
using transport::testing::MakeRdma;
using transport::testing::PatternMessage;

bool Infiniband(Transport& t) {
  return InfoOf(t).link_layer == "InfiniBand";
}

// A server that counts the messages it receives.
struct CountingServer {
  CountingServer() : transport(MakeRdma()) {
    auto l = transport->Listen("rdma://127.0.0.1:0", [this](const std::shared_ptr<Socket>&) {
      SocketHandlers h;
      h.on_message = [this](Socket&, Buffer) {
        std::lock_guard lock(mu);
        ++messages;
        cv.notify_all();
      };
      return h;
    });
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    listener = std::move(l).value();
  }
  bool WaitFor(uint64_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 30s, [&] { return messages >= n; });
  }
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Listener> listener;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t messages = 0;
};

TEST(RdmaAddressingTest, EachConnectionStartsAtARandomPsnThatThePeerExpects) {
  CountingServer server;
  RdmaOptions four;
  four.engines_per_destination = 4;
  auto client = MakeRdma(four);
  std::vector<std::shared_ptr<Socket>> sockets;
  for (int i = 0; i < 4; ++i) {
    auto s = client->Connect(server.listener->url(), {}, 5s);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sockets.push_back(*s);
  }
  std::set<uint32_t> client_send, client_receive, server_send, server_receive;
  for (const RdmaEngineInfo& e : InfoOf(*client).engines) {
    client_send.insert(e.send_psn);
    client_receive.insert(e.receive_psn);
  }
  for (const RdmaEngineInfo& e : InfoOf(*server.transport).engines) {
    server_send.insert(e.send_psn);
    server_receive.insert(e.receive_psn);
  }
  // Four 24-bit random draws all equal: 2^-72. Before PSNs were random every one was 0.
  EXPECT_GT(client_send.size(), 1u) << "every connection started at PSN " << *client_send.begin();
  EXPECT_EQ(client_send, server_receive) << "each side expects the PSN the other starts at";
  EXPECT_EQ(server_send, client_receive);
  for (auto& s : sockets) s->Send(PatternMessage(64, 1));
  EXPECT_TRUE(server.WaitFor(4));
}

TEST(RdmaAddressingTest, QpsCarryTheConfiguredTrafficClassServiceLevelAndPath) {
  CountingServer server;
  RdmaOptions marked;
  marked.traffic_class = 98;  // DSCP 24, ECT(0)
  marked.service_level = 5;
  auto client = MakeRdma(marked);
  auto socket = client->Connect(server.listener->url(), {}, 5s);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  const RdmaTransportInfo info = InfoOf(*client);
  EXPECT_EQ(info.traffic_class, 98);
  EXPECT_EQ(info.service_level, 5);
  EXPECT_FALSE(info.gid_reason.empty());
  ASSERT_EQ(info.engines.size(), 1u);
  const RdmaEngineInfo& e = info.engines[0];
  EXPECT_EQ(e.traffic_class, 98);
  EXPECT_EQ(e.service_level, 5);
  if (info.link_layer == "InfiniBand") {
    EXPECT_FALSE(e.global) << "one subnet: by LID, no GRH";
    EXPECT_NE(e.remote_lid, 0);
  } else {
    EXPECT_TRUE(e.global) << "RoCE needs a GRH";
    EXPECT_EQ(int(e.gid_index), info.gid_index);
  }
  EXPECT_EQ(InfoOf(*server.transport).engines.at(0).traffic_class, RdmaOptions{}.traffic_class);
}

// The simnic counts packets a RoCE fabric would put in its default (lossy) class; the
// transport's default traffic class keeps bexpress out of it, a class of 0 does not.
TEST(RdmaAddressingTest, TheTrafficClassReachesTheNic) {
  CountingServer server;
  if (Infiniband(*server.transport)) GTEST_SKIP() << "no traffic class on InfiniBand";
  verbs::Device* device = transport::testing::TestDevice();
  ASSERT_NE(device, nullptr);
  auto unmarked = [&] {
    bxsim_device_counters c{};
    EXPECT_EQ(device->lib().sim().query_counters(device->context(), &c), 0);
    return c.unmarked_packets;
  };
  auto send_ten = [&](const RdmaOptions& rdma, uint64_t total) {
    auto client = MakeRdma(rdma);
    auto socket = client->Connect(server.listener->url(), {}, 5s);
    ASSERT_TRUE(socket.ok()) << socket.status().ToString();
    for (int i = 0; i < 10; ++i) (*socket)->Send(PatternMessage(256, i));
    ASSERT_TRUE(server.WaitFor(total));
  };
  const uint64_t before = unmarked();
  send_ten(RdmaOptions{}, 10);
  EXPECT_EQ(unmarked(), before) << "the default class is marked";
  RdmaOptions zero;
  zero.traffic_class = 0;
  send_ten(zero, 20);
  EXPECT_GE(unmarked(), before + 10) << "class 0: every message of the client counted";
}

TEST(RdmaAddressingTest, BadAddressingSettingsFailTheTransportSayingWhich) {
  setenv("BX_TRAFFIC_CLASS", "300", 1);
  auto bad_class = CreateRdmaTransport(TransportOptions{});
  unsetenv("BX_TRAFFIC_CLASS");
  ASSERT_FALSE(bad_class.ok());
  EXPECT_NE(bad_class.status().message().find("BX_TRAFFIC_CLASS"), std::string::npos);

  setenv("BX_GID_INDEX", "200", 1);
  auto bad_index = CreateRdmaTransport(TransportOptions{});
  unsetenv("BX_GID_INDEX");
  ASSERT_FALSE(bad_index.ok());
  EXPECT_NE(bad_index.status().message().find("200"), std::string::npos)
      << bad_index.status().ToString();
}

}  // namespace
}  // namespace bx::rdma
