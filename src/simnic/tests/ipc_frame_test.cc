// The fabric's framing (simnic/ipc_frame.h), byte by byte: a connection opens with the cookie;
// a header is checked before anything is allocated; a payload grows with the bytes that arrive.
#include "simnic/ipc_frame.h"

#include <gtest/gtest.h>

#include <cstring>

namespace bx::simnic {
namespace {

constexpr uint32_t kPeer = 77;

IpcHeader Header(uint32_t payload_length, uint32_t src_pid = kPeer) {
  IpcHeader h{};
  h.magic = kIpcMagic;
  h.kind = kIpcRequest;
  h.src_pid = src_pid;
  h.payload_length = payload_length;
  return h;
}

// Feeds `bytes` in reads of at most `chunk`; false when the parser refused the stream.
bool Feed(IpcFrameParser& parser, const std::vector<uint8_t>& bytes, size_t chunk,
          std::vector<IpcFrame>* frames) {
  for (size_t at = 0; at < bytes.size();) {
    std::span<uint8_t> into = parser.Next();
    size_t n = std::min({into.size(), chunk, bytes.size() - at});
    std::memcpy(into.data(), bytes.data() + at, n);
    at += n;
    if (!parser.Commit(n, frames)) return false;
  }
  return true;
}

std::vector<uint8_t> Stream(const IpcCookie& cookie, const IpcHeader& header, size_t payload) {
  std::vector<uint8_t> bytes(cookie.begin(), cookie.end());
  const auto* h = reinterpret_cast<const uint8_t*>(&header);
  bytes.insert(bytes.end(), h, h + sizeof(header));
  for (size_t i = 0; i < payload; ++i) bytes.push_back(uint8_t(i * 7));
  return bytes;
}

TEST(IpcFrameParserTest, FramesArriveWhateverTheReadSizes) {
  const IpcCookie cookie = MakeIpcCookie("tea");
  std::vector<uint8_t> bytes = Stream(cookie, Header(5000), 5000);
  const auto second = Stream({}, Header(0), 0);
  bytes.insert(bytes.end(), second.begin() + kIpcCookieBytes, second.end());
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{4096}, bytes.size()}) {
    IpcFrameParser parser(kPeer, cookie);
    std::vector<IpcFrame> frames;
    ASSERT_TRUE(Feed(parser, bytes, chunk, &frames)) << parser.error();
    ASSERT_EQ(frames.size(), 2u) << chunk;
    ASSERT_EQ(frames[0].payload.size(), 5000u);
    EXPECT_EQ(frames[0].payload[4999], uint8_t(4999 * 7));
    EXPECT_TRUE(frames[1].payload.empty());
  }
}

TEST(IpcFrameParserTest, AWrongCookieIsAnImpostor) {
  IpcFrameParser parser(kPeer, MakeIpcCookie("tea"));
  std::vector<IpcFrame> frames;
  EXPECT_FALSE(Feed(parser, Stream(MakeIpcCookie("coffee"), Header(0), 0), 64, &frames));
  EXPECT_EQ(parser.error(), "wrong fabric cookie");
  EXPECT_TRUE(parser.impostor());
  EXPECT_TRUE(parser.Next().empty());
  EXPECT_TRUE(frames.empty());
}

TEST(IpcFrameParserTest, HeadersAreCheckedBeforeAnythingIsAllocated) {
  struct Case {
    IpcHeader header;
    std::string_view error;
    bool impostor;
  };
  IpcHeader bad_magic = Header(0);
  bad_magic.magic = 1;
  IpcHeader bad_kind = Header(0);
  bad_kind.kind = 9;
  IpcHeader jumbo_datagram = Header(kIpcMaxDatagram + 1);
  jumbo_datagram.kind = kIpcDatagram;
  const Case cases[] = {
      {bad_magic, "bad magic", false},
      {Header(0, kPeer + 1), "the frame names another process as its sender", true},
      {bad_kind, "unknown frame kind", false},
      {Header(kIpcMaxPayload + 1), "payload above the largest message", false},
      {jumbo_datagram, "datagram above the largest MTU", false},
  };
  for (const Case& c : cases) {
    IpcFrameParser parser(kPeer, IpcCookie{});
    std::vector<IpcFrame> frames;
    EXPECT_FALSE(Feed(parser, Stream(IpcCookie{}, c.header, 0), 64, &frames));
    EXPECT_EQ(parser.error(), c.error);
    EXPECT_EQ(parser.impostor(), c.impostor) << c.error;
    EXPECT_EQ(parser.held_bytes(), 0u) << c.error;
  }
}

// A header announcing 2 GiB costs 1 MiB until more arrives; then four times what came.
TEST(IpcFrameParserTest, APayloadGrowsWithTheBytesThatArrive) {
  IpcFrameParser parser(kPeer, IpcCookie{});
  std::vector<IpcFrame> frames;
  ASSERT_TRUE(Feed(parser, Stream(IpcCookie{}, Header(kIpcMaxPayload), 0), 4096, &frames));
  EXPECT_EQ(parser.Next().size(), size_t{1} << 20);
  EXPECT_LE(parser.held_bytes(), size_t{1} << 20);
  ASSERT_TRUE(Feed(parser, std::vector<uint8_t>(size_t{1} << 20, 1), size_t{1} << 20, &frames));
  parser.Next();
  EXPECT_LE(parser.held_bytes(), size_t{4} << 20);
  EXPECT_TRUE(frames.empty());
}

}  // namespace
}  // namespace bx::simnic
