// rdma:// specifics: the bootstrap handshake refuses malformed peers on either side with a clear
// error, and writes into a buffer known in advance skip the rendezvous.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <thread>

#include "bx/bemalloc.h"
#include "transport/auth.h"
#include "transport/rdma/bootstrap.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tests/transports_under_test.h"

namespace bx::rdma {
namespace {

using namespace std::chrono_literals;
using transport::testing::MakeRdma;

Hello ValidHello() {
  Hello h;
  h.qp_num = 0x123;
  h.recv_queue_depth = 64;
  h.eager_limit = 16384;
  h.max_message_bytes = 1 << 20;
  return h;
}

TEST(RdmaBootstrapTest, DecodeRefusesMalformedHellosSayingWhy) {
  uint8_t bytes[64];
  EncodeHello(ValidHello(), bytes);
  ASSERT_TRUE(DecodeHello(bytes).ok());
  struct Case {
    size_t offset;
    uint8_t value;
    const char* expect;
  } cases[] = {{0, 0x00, "magic"},
               {4, 0x09, "version"},
               {32, 0x00, "receive queue"},
               {39, 0xff, "eager limit"}};
  for (const Case& c : cases) {
    uint8_t bad[64];
    std::memcpy(bad, bytes, 64);
    bad[c.offset] = c.value;
    if (c.offset == 32) std::memset(bad + 32, 0, 4);
    auto r = DecodeHello(bad);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.status().ToString().find(c.expect), std::string::npos) << r.status().ToString();
  }
}

// A TCP server on loopback that answers each connection with `reply` and then waits.
class FakeServer {
 public:
  explicit FakeServer(std::vector<uint8_t> reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(fd_, 4);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 5000) != 1) return;
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      if (!reply_.empty()) {
        ssize_t n = send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        (void)n;
      }
      shutdown(c, SHUT_WR);
      char sink[256];
      while (recv(c, sink, sizeof(sink), 0) > 0) {
      }
      close(c);
    });
  }
  ~FakeServer() {
    thread_.join();
    close(fd_);
  }
  std::string url() const { return "rdma://127.0.0.1:" + std::to_string(port_); }

 private:
  std::vector<uint8_t> reply_;
  int fd_;
  uint16_t port_;
  std::thread thread_;
};

TEST(RdmaBootstrapTest, ConnectRefusesAServerThatIsNotABexpressPeer) {
  auto transport = MakeRdma();
  {
    FakeServer server(std::vector<uint8_t>(64, 0x41));  // 64 bytes of 'A'
    auto s = transport->Connect(server.url(), {}, 2000ms);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(s.status().message().find("not a bexpress RDMA peer"), std::string::npos)
        << s.status().ToString();
  }
  {
    FakeServer server({});  // closes without a word
    auto s = transport->Connect(server.url(), {}, 2000ms);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("closed the bootstrap connection"), std::string::npos)
        << s.status().ToString();
  }
  {
    std::vector<uint8_t> truncated(20, 0);
    FakeServer server(truncated);  // a hello cut short
    auto s = transport->Connect(server.url(), {}, 2000ms);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("20 of 64 bytes"), std::string::npos)
        << s.status().ToString();
  }
}

// A plain TCP connection from `source` (a loopback address) to `port`; it sends nothing itself.
int RawConnection(const char* source, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0) << strerror(errno);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0) << strerror(errno);
  return fd;
}

// A listener on 127.0.0.1 that counts the sockets it accepts.
struct CountingListener {
  explicit CountingListener(Transport& transport) {
    auto listening = transport.Listen("rdma://127.0.0.1:0", [this](const std::shared_ptr<Socket>&) {
      accepted.fetch_add(1);
      return SocketHandlers{};
    });
    EXPECT_TRUE(listening.ok()) << listening.status().ToString();
    if (!listening.ok()) return;
    listener = std::move(listening).value();
    port = ParseUrl(listener->url())->port;
  }
  std::atomic<int> accepted{0};
  std::unique_ptr<Listener> listener;
  uint16_t port = 0;
};

TEST(RdmaBootstrapTest, ListenerDropsGarbageAndKeepsServing) {
  auto transport = MakeRdma();
  CountingListener counted(*transport);
  ASSERT_TRUE(counted.listener);
  auto before = bemalloc::GetCounters();
  for (int i = 0; i < 3; ++i) {
    int fd = RawConnection("127.0.0.1", counted.port);
    uint8_t garbage[64];
    std::memset(garbage, 0xee, sizeof(garbage));  // claims absurd sizes everywhere
    ASSERT_EQ(send(fd, garbage, sizeof(garbage), 0), 64);
    char c;
    EXPECT_EQ(recv(fd, &c, 1, 0), 0) << "the listener closes the connection";
    close(fd);
  }
  EXPECT_EQ(counted.accepted.load(), 0);
  EXPECT_EQ(bemalloc::GetCounters().registrations, before.registrations)
      << "nothing was allocated for a refused peer";
  // And a real peer still gets through.
  auto client = MakeRdma();
  auto s = client->Connect(counted.listener->url(), {}, 5000ms);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int i = 0; i < 1000 && counted.accepted.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(counted.accepted.load(), 1);
}

// Versions (bootstrap.h): a version 4 peer's Hello is spoken to at 4, ours passes the checks
// a version 4 build makes, a newer peer is met at our newest, and one we cannot speak to is
// refused naming both windows.
TEST(RdmaBootstrapTest, HellosNegotiateTheHighestVersionBothSpeak) {
  uint8_t v4[64];
  EncodeHelloSpeaking(ValidHello(), {4, 4}, v4);
  for (size_t i = 52; i < 64; ++i) ASSERT_EQ(v4[i], 0) << "a version 4 Hello: reserved byte " << i;
  auto old_peer = DecodeHello(v4);
  ASSERT_TRUE(old_peer.ok()) << old_peer.status().ToString();
  EXPECT_EQ(old_peer->version, 4);

  // What a version 4 build checked before reading fields it shares with us: the magic, the
  // version field equal to 4, and no unknown flag.
  uint8_t ours[64];
  EncodeHello(ValidHello(), ours);
  auto u16 = [](const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); };
  EXPECT_EQ(u16(ours + 4), 4) << "a version 4 build refuses any other version field";
  EXPECT_EQ(u16(ours + 6) & ~kHelloFlagAuth, 0);
  EXPECT_EQ(DecodeHello(ours)->version, kProtocolVersions.newest);

  uint8_t future[64];
  EncodeHelloSpeaking(ValidHello(), {4, 7}, future);
  EXPECT_EQ(DecodeHello(future)->version, kProtocolVersions.newest);
  EncodeHelloSpeaking(ValidHello(), {6, 7}, future);
  auto refused = DecodeHello(future);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("6..7"), std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("4..5"), std::string::npos)
      << refused.status().ToString();
}

// A listener answers a Hello it cannot speak to with a version Refusal rather than silence, so
// the peer's operator reads why.
TEST(RdmaBootstrapTest, ListenerRefusesAPeerOfAnotherVersionSayingSo) {
  auto transport = MakeRdma();
  CountingListener counted(*transport);
  ASSERT_TRUE(counted.listener);
  int fd = RawConnection("127.0.0.1", counted.port);
  uint8_t hello[64];
  EncodeHelloSpeaking(ValidHello(), {6, 7}, hello);
  ASSERT_EQ(send(fd, hello, sizeof(hello), 0), 64);
  uint8_t reply[64];
  size_t got = 0;
  while (got < sizeof(reply)) {
    ssize_t n = recv(fd, reply + got, sizeof(reply) - got, 0);
    if (n <= 0) break;
    got += size_t(n);
  }
  close(fd);
  ASSERT_EQ(got, sizeof(reply)) << "the listener closed without a refusal";
  auto decoded = DecodeReply(reply);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_EQ(decoded->kind, Reply::Kind::kRefusal);
  EXPECT_EQ(decoded->refusal, uint16_t(transport::auth::Refusal::kVersion));
  EXPECT_EQ(counted.accepted.load(), 0);
}

void RaiseDescriptorLimit(rlim_t wanted) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = std::min(wanted, limit.rlim_max);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  ASSERT_GE(limit.rlim_cur, wanted) << "the hard descriptor limit is too low for this test";
}

uint64_t PeersRefused(Transport& transport) {
  auto info = GetRdmaTransportInfo(transport);
  EXPECT_TRUE(info.ok());
  return info.ok() ? info->peers_refused : 0;
}

// Silent sockets used to stall every connect behind them, 5 s each, since the
// acceptor ran handshakes one at a time. Now the acceptor waits for Hellos without blocking, at
// most 64 per remote address (a 65th evicts that address's oldest), and a client from
// elsewhere gets straight in.
TEST(RdmaBootstrapTest, SilentClientsStallNeitherTheAcceptorNorOtherClients) {
  auto server = MakeRdma();
  CountingListener counted(*server);
  ASSERT_TRUE(counted.listener);
  std::vector<int> silent;
  for (int i = 0; i < 70; ++i) silent.push_back(RawConnection("127.0.0.2", counted.port));
  // The six oldest are evicted at once, long before the 2 s Hello limit could refuse any of
  // the others.
  for (int i = 0; i < 2000 && PeersRefused(*server) < 6; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(PeersRefused(*server), 6u);
  // Well inside the 5 s a single silent client used to hold the acceptor for.
  auto client = MakeRdma();
  auto started = std::chrono::steady_clock::now();
  auto socket = client->Connect(counted.listener->url(), {}, 4000ms);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 4000ms);
  // Closing the listener drops the 64 waiting for a Hello instead of waiting them out.
  started = std::chrono::steady_clock::now();
  counted.listener->Close();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2500ms);
  int closed = 0;
  for (int fd : silent) {
    pollfd p{fd, POLLIN, 0};
    char c;
    if (poll(&p, 1, 0) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) <= 0) ++closed;
    close(fd);
  }
  EXPECT_EQ(closed, 70) << "every silent connection was closed by the server";
  EXPECT_EQ(counted.accepted.load(), 1);
}

// 500 silent and 100 slow connections from 50 addresses, held while legitimate clients connect:
// they cost the listener a descriptor each and no thread, and the clients (whose Hello arrives
// at once) get in well inside their connect deadline.
TEST(RdmaBootstrapTest, SilentAndSlowClientsStallNeitherTheAcceptorNorOtherClients) {
  RaiseDescriptorLimit(4096);
  auto server = MakeRdma();
  CountingListener counted(*server);
  ASSERT_TRUE(counted.listener);
  // 500 silent connections from 50 addresses and 100 that send half a Hello and stop.
  std::vector<int> attackers;
  for (int i = 0; i < 600; ++i) {
    std::string source = "127.0.1." + std::to_string(1 + i % 50);
    int fd = RawConnection(source.c_str(), counted.port);
    if (i >= 500) {
      uint8_t half[kRecordBytes / 2] = {};
      EXPECT_EQ(send(fd, half, sizeof(half), MSG_NOSIGNAL), ssize_t(sizeof(half)));
    }
    attackers.push_back(fd);
  }
  // Legitimate clients, each its own transport (engine, handshake), while the attack holds.
  for (int i = 0; i < 5; ++i) {
    auto client = MakeRdma();
    auto started = std::chrono::steady_clock::now();
    auto socket = client->Connect(counted.listener->url(), {}, 4000ms);
    ASSERT_TRUE(socket.ok()) << socket.status().ToString();
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    std::printf("connect %d during the attack: %lld ms\n", i, static_cast<long long>(took.count()));
  }
  EXPECT_EQ(counted.accepted.load(), 5);
  // Closing the listener aborts the handshakes in progress instead of waiting them out.
  auto started = std::chrono::steady_clock::now();
  counted.listener->Close();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2500ms);
  for (int fd : attackers) close(fd);
}

TEST(RdmaSocketTest, WriteToAKnownBufferSkipsTheRendezvousAndFollowsEarlierSends) {
  auto server = MakeRdma();
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> events;  // what the server saw, in order
  auto listener = server->Listen("rdma://127.0.0.1:0", [&](const std::shared_ptr<Socket>&) {
    SocketHandlers handlers;
    handlers.on_message = [&](Socket&, Buffer message) {
      std::lock_guard lock(mu);
      events.push_back("message " + std::to_string(message.size()));
      cv.notify_all();
    };
    handlers.on_remote_write = [&](Socket&, uint16_t tag) {
      std::lock_guard lock(mu);
      events.push_back("write " + std::to_string(tag));
      cv.notify_all();
    };
    return handlers;
  });
  ASSERT_TRUE(listener.ok());
  // The server's "tensor", whose address and rkey the client learnt out of band.
  Buffer tensor = std::move(Buffer::Allocate(256 << 10)).value();
  std::memset(tensor.data(), 0, tensor.size());
  auto client = MakeRdma();
  auto socket = client->Connect((*listener)->url(), {}, 5000ms);
  ASSERT_TRUE(socket.ok());
  // A rendezvous-sized message first: the write must not overtake it.
  (*socket)->Send(transport::testing::PatternMessage(100 << 10, 3));
  std::optional<Status> sent;  // guarded by mu; the sender may hear after the receiver
  (*socket)->WriteTo(transport::testing::PatternMessage(256 << 10, 9), RemoteBuffer::Of(tensor), 7,
                     [&](const Status& s) {
                       std::lock_guard lock(mu);
                       sent = s;
                       cv.notify_all();
                     });
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return events.size() == 2 && sent; }));
  EXPECT_EQ(events, (std::vector<std::string>{"message 102400", "write 7"}));
  EXPECT_TRUE(transport::testing::HasPattern(tensor, 256 << 10, 9));
  EXPECT_TRUE(sent->ok()) << sent->ToString();
  auto counters = (*socket)->counters();
  EXPECT_EQ(counters["rendezvous_exchanges"], 1u);  // the message's, none for the write
  EXPECT_EQ(counters["remote_writes"], 1u);
}

TEST(RdmaSocketTest, WriteToRefusesAMessageLongerThanTheTarget) {
  auto server = MakeRdma();
  auto listener = server->Listen("rdma://127.0.0.1:0",
                                 [&](const std::shared_ptr<Socket>&) { return SocketHandlers{}; });
  ASSERT_TRUE(listener.ok());
  Buffer tensor = std::move(Buffer::Allocate(4096)).value();
  auto client = MakeRdma();
  auto socket = client->Connect((*listener)->url(), {}, 5000ms);
  ASSERT_TRUE(socket.ok());
  Status result = Internal("not called");
  (*socket)->WriteTo(transport::testing::PatternMessage(4097, 1), RemoteBuffer::Of(tensor), 1,
                     [&](const Status& s) { result = s; });
  EXPECT_EQ(result.code(), StatusCode::kInvalidArgument) << result.ToString();
  EXPECT_EQ((*socket)->counters()["remote_writes"], 0u);
  EXPECT_TRUE((*socket)->status().ok());  // a refused write does not end the socket
}

TEST(TcpSocketTest, WriteToIsUnimplemented) {
  auto server = transport::testing::FindTransport("tcp").create({});
  ASSERT_TRUE(server.ok());
  auto listener = (*server)->Listen(
      "tcp://127.0.0.1:0", [&](const std::shared_ptr<Socket>&) { return SocketHandlers{}; });
  ASSERT_TRUE(listener.ok());
  auto client = transport::testing::FindTransport("tcp").create({});
  ASSERT_TRUE(client.ok());
  auto socket = (*client)->Connect((*listener)->url(), {}, 5000ms);
  ASSERT_TRUE(socket.ok());
  Buffer tensor = std::move(Buffer::Allocate(4096)).value();
  Status result = Internal("not called");
  (*socket)->WriteTo(transport::testing::PatternMessage(64, 1), RemoteBuffer::Of(tensor), 1,
                     [&](const Status& s) { result = s; });
  EXPECT_EQ(result.code(), StatusCode::kUnimplemented) << result.ToString();
  EXPECT_TRUE((*socket)->status().ok());
}

}  // namespace
}  // namespace bx::rdma
