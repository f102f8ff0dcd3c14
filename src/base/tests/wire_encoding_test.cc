// WireWriter and WireReader: the byte layout they produce, and what a short input does.
#include "base/wire_encoding.h"
#include "base/wire_version.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace bx {
namespace {

std::vector<uint8_t> AsVector(std::span<const std::byte> bytes) {
  std::vector<uint8_t> v;
  for (std::byte b : bytes) v.push_back(uint8_t(b));
  return v;
}

TEST(WireEncodingTest, ValuesAreLittleEndianOneAfterTheOther) {
  std::array<std::byte, 22> out{};
  WireWriter w{std::span<std::byte>(out)};
  w.PutU8(0x01);
  w.PutU16(0x0302);
  w.PutU32(0x07060504);
  w.PutU64(0x0f0e0d0c0b0a0908);
  w.PutF32(1.0f);  // 0x3f800000
  w.PutZeros(2);
  w.PutBytes("\xaa", 1);
  EXPECT_TRUE(w.ok());
  EXPECT_EQ(w.position(), out.size());
  EXPECT_EQ(AsVector(out),
            (std::vector<uint8_t>{1,  2,  3,  4,  5,    6,    7,    8,    9, 10, 11,
                                  12, 13, 14, 15, 0x00, 0x00, 0x80, 0x3f, 0, 0,  0xaa}));
}

TEST(WireEncodingTest, StringAndSpanWritersWriteTheSameBytes) {
  std::string appended = "hdr";
  WireWriter grow(&appended);
  std::array<uint8_t, 18> fixed{};
  WireWriter span{std::span<uint8_t>(fixed)};
  for (WireWriter* w : {&grow, &span}) {
    w->PutU16(0xbeef);
    const uint64_t keys[] = {1, 0x0102030405060708};
    w->PutU64s(keys);
    EXPECT_TRUE(w->ok());
    EXPECT_EQ(w->position(), 18u);
  }
  ASSERT_EQ(appended.size(), 3 + 18u);
  EXPECT_EQ(appended.substr(0, 3), "hdr");
  EXPECT_EQ(std::memcmp(appended.data() + 3, fixed.data(), fixed.size()), 0);
  EXPECT_EQ(fixed[0], 0xef);
  EXPECT_EQ(fixed[1], 0xbe);
  EXPECT_EQ(fixed[2], 0x01);
  EXPECT_EQ(fixed[10], 0x08);
  EXPECT_EQ(fixed[17], 0x01);
}

TEST(WireEncodingTest, ReaderReadsWhatTheWriterWrote) {
  std::string bytes;
  WireWriter w(&bytes);
  w.PutU8(7);
  w.PutU16(0x1234);
  w.PutU32(0xdeadbeef);
  w.PutU64(~uint64_t{0} - 1);
  const float gradients[] = {0.5f, -2.0f};
  w.PutF32s(gradients);
  w.PutBytes("tail", 4);

  WireReader r{std::as_bytes(std::span<const char>(bytes))};
  uint8_t u8 = 0;
  uint16_t u16 = 0;
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  float floats[2] = {};
  std::span<const std::byte> tail;
  ASSERT_TRUE(r.GetU8(&u8) && r.GetU16(&u16) && r.GetU32(&u32) && r.GetU64(&u64) &&
              r.GetF32s(floats) && r.Take(4, &tail));
  EXPECT_EQ(u8, 7);
  EXPECT_EQ(u16, 0x1234);
  EXPECT_EQ(u32, 0xdeadbeef);
  EXPECT_EQ(u64, ~uint64_t{0} - 1);
  EXPECT_EQ(floats[0], 0.5f);
  EXPECT_EQ(floats[1], -2.0f);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(tail.data()), tail.size()), "tail");
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(WireEncodingTest, TruncatedReadFailsAndConsumesNothing) {
  const uint8_t bytes[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06};
  WireReader r{std::span<const uint8_t>(bytes)};
  uint32_t first = 0;
  ASSERT_TRUE(r.GetU32(&first));
  EXPECT_EQ(first, 0x04030201u);
  // Two bytes left: a u32 does not fit.
  uint32_t second = 0xabcd;
  EXPECT_FALSE(r.GetU32(&second));
  EXPECT_EQ(second, 0xabcdu) << "a failed read leaves its output alone";
  EXPECT_EQ(r.position(), 4u);
  EXPECT_EQ(r.remaining(), 2u);
  std::span<const std::byte> view;
  EXPECT_FALSE(r.Take(3, &view));
  uint64_t keys[1] = {};
  EXPECT_FALSE(r.GetU64s(keys));
  // What does fit is still there.
  uint16_t last = 0;
  ASSERT_TRUE(r.GetU16(&last));
  EXPECT_EQ(last, 0x0605);
  uint8_t none = 0;
  EXPECT_FALSE(r.GetU8(&none));
  EXPECT_TRUE(r.GetBytes(nullptr, 0)) << "zero bytes always fit";
}

TEST(WireEncodingTest, FullSpanRefusesFurtherPuts) {
  std::array<std::byte, 4> out{};
  WireWriter w{std::span<std::byte>(out)};
  w.PutU16(0xffff);
  w.PutU32(0x11111111);  // does not fit: nothing written
  EXPECT_FALSE(w.ok());
  w.PutU16(0x2222);  // would fit, but the writer already failed: the bytes would be misplaced
  EXPECT_EQ(AsVector(out), (std::vector<uint8_t>{0xff, 0xff, 0, 0}));
  EXPECT_EQ(w.position(), 2u);
}

}  // namespace
// Two peers use the highest version both speak; windows that do not meet are refused, naming
// both.
TEST(WireVersionTest, NegotiatesTheHighestVersionBothSpeak) {
  EXPECT_EQ(NegotiateVersion("x", {4, 5}, {4, 4}).value(), 4);
  EXPECT_EQ(NegotiateVersion("x", {4, 5}, {4, 5}).value(), 5);
  EXPECT_EQ(NegotiateVersion("x", {4, 5}, {5, 9}).value(), 5);
  EXPECT_EQ(NegotiateVersion("x", {4, 5}, {1, 4}).value(), 4);
  Result<uint16_t> too_new = NegotiateVersion("handshake", {4, 5}, {6, 7});
  ASSERT_FALSE(too_new.ok());
  EXPECT_EQ(too_new.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(too_new.status().message(),
            "handshake: peer speaks version 6..7, this build speaks 4..5");
  EXPECT_FALSE(NegotiateVersion("x", {4, 5}, {1, 3}).ok());
  EXPECT_FALSE(NegotiateVersion("x", {4, 5}, {5, 4}).ok()) << "an inverted window is malformed";
}

}  // namespace bx
