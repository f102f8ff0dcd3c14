// tcp:// only: a listener fed random and truncated frame headers through raw sockets (after the
// connection handshake) must end each connection with a clear error, never crash, and never
// allocate what a header claims.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bx/bemalloc.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tests/transports_under_test.h"

namespace bx::tcp {
namespace {

using transport::testing::Waiter;

constexpr size_t kMaxMessage = size_t{1} << 20;

class TcpFrameFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions options;
    options.max_message_bytes = kMaxMessage;
    auto transport = CreateTcpTransport(options);
    ASSERT_TRUE(transport.ok()) << transport.status().ToString();
    transport_ = std::move(transport).value();
    auto listener = transport_->Listen("tcp://127.0.0.1:0", [this](const auto&) {
      return SocketHandlers{[this](Socket&, Buffer) { waiter_.Notify([&] { ++messages_; }); },
                            [this](Socket&, const Status& status) {
                              waiter_.Notify([&] { closes_.push_back(status); });
                            }};
    });
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    listener_ = std::move(listener).value();
    port_ = ParseUrl(listener_->url())->port;
  }
  void TearDown() override {
    listener_.reset();
    transport_.reset();
  }

  // Writes `bytes` on a fresh connection, half-closes it, and returns how the listener's socket
  // ended.
  Status Feed(const std::vector<std::byte>& bytes) {
    size_t before = 0;
    {
      std::lock_guard<std::mutex> lock(waiter_.mutex);
      before = closes_.size();
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port_);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    // The handshake (handshake.h) first, as any client: the frames are what is fuzzed here.
    Status accepted =
        ConnectingHandshake(fd, "", "tcp://127.0.0.1",
                            std::chrono::steady_clock::now() + std::chrono::seconds(5))
            .status();
    EXPECT_TRUE(accepted.ok()) << accepted.ToString();
    size_t written = 0;
    while (written < bytes.size()) {
      ssize_t n = send(fd, bytes.data() + written, bytes.size() - written, MSG_NOSIGNAL);
      if (n <= 0) break;  // the listener may hang up first: that is fine
      written += n;
    }
    shutdown(fd, SHUT_WR);
    bool ended = waiter_.WaitFor([&] { return closes_.size() > before; });
    close(fd);
    if (!ended) return Internal("the listener's socket never ended");
    std::lock_guard<std::mutex> lock(waiter_.mutex);
    return closes_.back();
  }

  static std::vector<std::byte> Header(uint64_t length) {
    FrameHeader header = EncodeFrameHeader(length);
    return {header.begin(), header.end()};
  }

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
  uint16_t port_ = 0;
  Waiter waiter_;
  std::vector<Status> closes_;  // guarded by waiter_.mutex
  int messages_ = 0;            // guarded by waiter_.mutex
};

void ExpectError(const Status& status, StatusCode code, const std::string& says) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_NE(status.message().find(says), std::string::npos) << status.ToString();
}

TEST_F(TcpFrameFuzzTest, RandomBytesAreRejected) {
  std::mt19937_64 random(0xF022);
  for (int i = 0; i < 100; ++i) {
    std::vector<std::byte> bytes(1 + random() % 48);
    for (std::byte& b : bytes) b = static_cast<std::byte>(random());
    Status status = Feed(bytes);
    EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
    EXPECT_FALSE(status.message().empty());
  }
  std::lock_guard<std::mutex> lock(waiter_.mutex);
  EXPECT_EQ(messages_, 0);
}

TEST_F(TcpFrameFuzzTest, TruncatedHeadersAreRejected) {
  std::vector<std::byte> header = Header(100);
  for (size_t length = 1; length < kFrameHeaderBytes; ++length) {
    Status status = Feed({header.begin(), header.begin() + length});
    ExpectError(status, StatusCode::kDataLoss, "in the middle of a frame header");
  }
}

TEST_F(TcpFrameFuzzTest, TruncatedPayloadIsRejected) {
  std::vector<std::byte> bytes = Header(1000);
  bytes.resize(bytes.size() + 10);
  ExpectError(Feed(bytes), StatusCode::kDataLoss, "in the middle of a message (10 of 1000");
}

TEST_F(TcpFrameFuzzTest, BadFieldsAreNamed) {
  std::vector<std::byte> bad_magic = Header(1);
  bad_magic[0] = std::byte{'X'};
  ExpectError(Feed(bad_magic), StatusCode::kDataLoss, "magic");
  std::vector<std::byte> bad_version = Header(1);
  bad_version[4] = std::byte{2};
  ExpectError(Feed(bad_version), StatusCode::kDataLoss, "version 2");
  std::vector<std::byte> bad_flags = Header(1);
  bad_flags[5] = std::byte{1};
  ExpectError(Feed(bad_flags), StatusCode::kDataLoss, "flags");
  std::vector<std::byte> bad_reserved = Header(1);
  bad_reserved[7] = std::byte{1};
  ExpectError(Feed(bad_reserved), StatusCode::kDataLoss, "reserved");
}

TEST_F(TcpFrameFuzzTest, OversizedLengthsAreRejectedBeforeAllocating) {
  uint64_t registered_before = bemalloc::GetCounters().registered_bytes;
  for (uint64_t length : {uint64_t{kMaxMessage} + 1, uint64_t{1} << 32, uint64_t{1} << 40,
                          uint64_t{1} << 63, ~uint64_t{0}}) {
    ExpectError(Feed(Header(length)), StatusCode::kDataLoss, "above the maximum message size");
  }
  // Nothing was allocated for the claims: the pool did not grow past what it already had.
  EXPECT_LE(bemalloc::GetCounters().registered_bytes, registered_before + (size_t{16} << 20));
}

TEST_F(TcpFrameFuzzTest, GoodFrameThenGarbage) {
  // A 5-byte message, then 16 bytes of garbage where the next header should be. The stream is
  // allocated once at its full size and filled in place: growing a vector<std::byte> with
  // resize() makes GCC 12 at -O3 report a false -Warray-bounds in the reallocation path.
  constexpr size_t kPayload = 5;
  constexpr size_t kGarbage = 16;
  std::vector<std::byte> bytes(kFrameHeaderBytes + kPayload + kGarbage, std::byte{0xEE});
  FrameHeader header = EncodeFrameHeader(kPayload);
  std::copy(header.begin(), header.end(), bytes.begin());
  std::fill_n(bytes.begin() + kFrameHeaderBytes, kPayload, std::byte{7});
  ExpectError(Feed(bytes), StatusCode::kDataLoss, "magic");
  std::lock_guard<std::mutex> lock(waiter_.mutex);
  EXPECT_EQ(messages_, 1);
}

TEST_F(TcpFrameFuzzTest, CleanCloseBetweenFramesIsNotAnError) {
  std::vector<std::byte> bytes = Header(0);  // a zero-length message, then end of stream
  Status status = Feed(bytes);
  EXPECT_EQ(status.code(), StatusCode::kAborted) << status.ToString();
  EXPECT_NE(status.message().find("peer closed the connection"), std::string::npos);
  std::lock_guard<std::mutex> lock(waiter_.mutex);
  EXPECT_EQ(messages_, 1);
}

// A header could once make the receiver allocate the whole announced length before a byte
// of payload arrived (8 connections announcing 256 MiB: 2 GiB). The buffer now grows with what
// arrives, and a message that grows arrives whole.
TEST(TcpReceiveMemoryTest, AnnouncedLengthsReserveOnlyWhatArrives) {
  constexpr uint64_t kAnnounced = uint64_t{256} << 20;
  TransportOptions options;
  options.max_message_bytes = kAnnounced;
  auto transport = CreateTcpTransport(options);
  ASSERT_TRUE(transport.ok());
  Waiter waiter;
  std::vector<std::shared_ptr<Socket>> sockets;  // guarded by waiter.mutex
  std::vector<Buffer> messages;                  // guarded by waiter.mutex
  auto listener = (*transport)->Listen("tcp://127.0.0.1:0", [&](const std::shared_ptr<Socket>& s) {
    waiter.Notify([&] { sockets.push_back(s); });
    return SocketHandlers{
        [&](Socket&, Buffer m) { waiter.Notify([&] { messages.push_back(std::move(m)); }); }, {}};
  });
  ASSERT_TRUE(listener.ok());
  const uint16_t port = ParseUrl((*listener)->url())->port;
  auto open_connection = [&] {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_TRUE(ConnectingHandshake(fd, "", "tcp://127.0.0.1",
                                    std::chrono::steady_clock::now() + std::chrono::seconds(5))
                    .ok());
    return fd;
  };
  auto send_all = [](int fd, const std::byte* data, size_t size) {
    for (size_t sent = 0; sent < size;) {
      ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      ASSERT_GT(n, 0);
      sent += size_t(n);
    }
  };
  const uint64_t registered_before = bemalloc::GetCounters().registered_bytes;
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    fds.push_back(open_connection());
    std::vector<std::byte> bytes(kFrameHeaderBytes + 100, std::byte{1});
    FrameHeader header = EncodeFrameHeader(kAnnounced);
    std::copy(header.begin(), header.end(), bytes.begin());
    send_all(fds.back(), bytes.data(), bytes.size());
  }
  // Each socket has read its header (and the 100 bytes) once it counts a read (polled: reads
  // notify nobody).
  auto all_read = [&] {
    std::lock_guard lock(waiter.mutex);
    if (sockets.size() < 8) return false;
    for (auto& s : sockets)
      if (s->counters()["read_calls"] == 0) return false;
    return true;
  };
  for (int i = 0; i < 2000 && !all_read(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(all_read());
  const uint64_t grown = bemalloc::GetCounters().registered_bytes - registered_before;
  EXPECT_LT(grown, uint64_t{64} << 20) << "8 headers announcing 256 MiB each reserved " << grown;

  // A 10 MiB message through the growing buffer (1, 4, then 10 MiB) arrives whole.
  constexpr size_t kLarge = size_t{10} << 20;
  int fd = open_connection();
  std::vector<std::byte> bytes(kFrameHeaderBytes + kLarge);
  FrameHeader header = EncodeFrameHeader(kLarge);
  std::copy(header.begin(), header.end(), bytes.begin());
  for (size_t i = 0; i < kLarge; ++i) bytes[kFrameHeaderBytes + i] = std::byte(i * 131 % 251);
  send_all(fd, bytes.data(), bytes.size());
  ASSERT_TRUE(waiter.WaitFor([&] { return !messages.empty(); }, std::chrono::seconds(30)));
  std::lock_guard lock(waiter.mutex);
  ASSERT_EQ(messages[0].size(), kLarge);
  EXPECT_EQ(std::memcmp(messages[0].data(), bytes.data() + kFrameHeaderBytes, kLarge), 0);
  EXPECT_EQ(sockets.back()->counters()["grown_copy_bytes"], uint64_t{5} << 20);
  for (int f : fds) close(f);
  close(fd);
}

}  // namespace
}  // namespace bx::tcp
