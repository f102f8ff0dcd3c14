// tcp:// handshake versions (handshake.h): this build speaks versions 1 and 2 and uses the
// highest both sides speak, so a cluster can be upgraded one process at a time. The version 1
// peer here is frozen as version 1 builds behaved: any record whose version byte is not 1 is
// dropped with the connection, unanswered.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "bx/buffer.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tests/transports_under_test.h"

namespace bx::tcp::versions_test {
namespace {

using namespace std::chrono_literals;

constexpr uint8_t kHello = 1, kAccept = 3, kRefuse = 4;

HandshakeRecord Record(uint8_t version, uint8_t type, uint16_t arg) {
  HandshakeRecord r{};
  const uint8_t head[] = {0x42, 0x58, 0x54, 0x48, version, type, uint8_t(arg), uint8_t(arg >> 8)};
  std::memcpy(r.data(), head, sizeof(head));
  return r;
}

// A plain TCP connection to a loopback port (-1 when refused), for the handshake by hand.
int ConnectTo(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

HandshakeRecord AsRecord(const std::string& bytes) {
  HandshakeRecord r{};
  EXPECT_EQ(bytes.size(), r.size());
  std::memcpy(r.data(), bytes.data(), std::min(bytes.size(), r.size()));
  return r;
}

// The accepting side answers each client at the highest version both speak, in that version's
// records, and refuses a client it cannot speak to with a version Refuse.
TEST(TcpVersionsTest, AcceptingSideAnswersEachClientAtTheHighestCommonVersion) {
  AcceptingHandshake v1_client("");
  auto step = v1_client.OnRecord(Record(1, kHello, 0));
  ASSERT_EQ(step.outcome, AcceptingHandshake::Outcome::kAuthenticated) << step.why.ToString();
  EXPECT_EQ(v1_client.version(), 1);
  EXPECT_EQ(AsRecord(v1_client.Accept())[4], 1) << "a version 1 client reads only version 1";

  AcceptingHandshake v2_client("");
  step = v2_client.OnRecord(Record(2, kHello, 1 << 8));  // oldest 1, newest 2
  ASSERT_EQ(step.outcome, AcceptingHandshake::Outcome::kAuthenticated) << step.why.ToString();
  EXPECT_EQ(v2_client.version(), 2);
  EXPECT_EQ(AsRecord(v2_client.Accept())[4], 2);

  AcceptingHandshake newer_client("");
  step = newer_client.OnRecord(Record(9, kHello, 1 << 8));  // a later build, still speaking 1..9
  ASSERT_EQ(step.outcome, AcceptingHandshake::Outcome::kAuthenticated) << step.why.ToString();
  EXPECT_EQ(newer_client.version(), kHandshakeVersions.newest);

  AcceptingHandshake too_new("");
  step = too_new.OnRecord(Record(4, kHello, 3 << 8));  // speaks 3..4 only
  ASSERT_EQ(step.outcome, AcceptingHandshake::Outcome::kRefused);
  EXPECT_NE(step.why.message().find("3..4"), std::string::npos) << step.why.ToString();
  EXPECT_NE(step.why.message().find("1..2"), std::string::npos) << step.why.ToString();
  const HandshakeRecord refuse = AsRecord(step.reply);
  EXPECT_EQ(refuse[5], kRefuse);
  EXPECT_EQ(refuse[6], uint8_t(transport::auth::Refusal::kVersion));

  AcceptingHandshake malformed("");
  step = malformed.OnRecord(Record(2, kHello, 3 << 8));  // oldest 3 above newest 2
  EXPECT_EQ(step.outcome, AcceptingHandshake::Outcome::kRefused);
  EXPECT_EQ(step.why.code(), StatusCode::kDataLoss) << step.why.ToString();
}

// A tcp:// peer frozen at version 1: accepts a version 1 Hello without auth, closes on anything
// else unanswered, then reads one frame header and records it.
class VersionOnePeer {
 public:
  VersionOnePeer() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~VersionOnePeer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

  std::atomic<int> hellos_seen{0};
  std::atomic<int> hellos_refused{0};
  std::atomic<bool> frame_seen{false};
  std::array<uint8_t, 4> frame_magic{};

 private:
  static bool ReadAll(int c, uint8_t* p, size_t n) {
    for (size_t got = 0; got < n;) {
      pollfd pfd{c, POLLIN, 0};
      if (poll(&pfd, 1, 10000) != 1) return false;
      ssize_t r = recv(c, p + got, n - got, 0);
      if (r <= 0) return false;
      got += size_t(r);
    }
    return true;
  }

  void Serve() {
    while (!stop_ && !frame_seen) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) != 1) continue;
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      HandshakeRecord hello{};
      if (ReadAll(c, hello.data(), hello.size())) {
        ++hellos_seen;
        if (hello[4] != 1 || hello[5] != kHello || hello[6] != 0 || hello[7] != 0) {
          ++hellos_refused;  // version 1 builds: "peer speaks version 2", closed, no answer
        } else {
          HandshakeRecord accept = Record(1, kAccept, 0);
          (void)send(c, accept.data(), accept.size(), MSG_NOSIGNAL);
          uint8_t header[16];
          if (ReadAll(c, header, sizeof(header))) {
            std::memcpy(frame_magic.data(), header, 4);
            frame_seen = true;
          }
        }
      }
      close(c);
    }
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A version 2 build connecting to a version 1 peer: its version 2 Hello is dropped unanswered,
// it connects again offering version 1, and messages flow. Without the second offer the
// connection fails (the first half of the test shows what a version 1 peer does to the offer).
TEST(TcpVersionsTest, ConnectsToAVersionOnePeerByOfferingVersionOneAgain) {
  {
    VersionOnePeer peer;
    auto url = ParseUrl(peer.url());
    ASSERT_TRUE(url.ok());
    int fd = ConnectTo(url->port);
    ASSERT_GE(fd, 0);
    bool unanswered = false;
    auto offered_both =
        ConnectingHandshake(fd, "", peer.url(), std::chrono::steady_clock::now() + 10s,
                            kHandshakeVersions, &unanswered);
    close(fd);
    EXPECT_FALSE(offered_both.ok()) << "a version 1 peer drops a version 2 Hello";
    EXPECT_TRUE(unanswered) << offered_both.status().ToString();
  }

  VersionOnePeer peer;
  TransportOptions options;
  auto transport = CreateTcpTransport(options);
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  auto socket = (*transport)->Connect(peer.url(), {}, 10000ms);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  EXPECT_EQ(peer.hellos_refused.load(), 1);
  EXPECT_EQ(peer.hellos_seen.load(), 2);
  (*socket)->Send(transport::testing::PatternMessage(100, 7));
  for (int i = 0; i < 1000 && !peer.frame_seen; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(peer.frame_seen) << "the version 1 peer got no frame";
  const uint8_t version_one_frame[] = {0x42, 0x58, 0x54, 0x31};  // "BXT1"
  EXPECT_EQ(std::memcmp(peer.frame_magic.data(), version_one_frame, 4), 0);
  (*socket)->Close();
}

// Two version 2 builds: one connection, no second offer.
TEST(TcpVersionsTest, TwoCurrentBuildsAgreeOnTheNewestAtTheFirstOffer) {
  TransportOptions options;
  auto server = CreateTcpTransport(options);
  auto client = CreateTcpTransport(options);
  ASSERT_TRUE(server.ok() && client.ok());
  // Shared with the callback: the server's I/O thread may accept after this scope has ended.
  auto accepted = std::make_shared<std::atomic<int>>(0);
  auto listener =
      (*server)->Listen("tcp://127.0.0.1:0", [accepted](const std::shared_ptr<Socket>&) {
        ++*accepted;
        return SocketHandlers{};
      });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto url = ParseUrl((*listener)->url());
  ASSERT_TRUE(url.ok());
  int fd = ConnectTo(url->port);
  ASSERT_GE(fd, 0);
  auto agreed =
      ConnectingHandshake(fd, "", (*listener)->url(), std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(agreed.ok()) << agreed.status().ToString();
  EXPECT_EQ(*agreed, kHandshakeVersions.newest);
  close(fd);
}

}  // namespace
}  // namespace bx::tcp::versions_test
