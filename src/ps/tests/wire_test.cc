// Wire codecs: round trips, exact sizes, and hostile input (truncation, mutation, huge
// counts) that must give DataLoss, never a crash or an out-of-bounds read (run under ASan).
#include <gtest/gtest.h>

#include <cstring>

#include "bx/ps/table_config.h"
#include "ps/wire.h"
#include "ps/workload.h"

namespace bx::ps {
namespace {

using Bytes = std::vector<std::byte>;

PushRequest SamplePush() {
  PushRequest p;
  p.id = PushId{0x1234567890abcdefull, 42};
  p.table_id = 3;
  p.dim = 3;
  p.keys = {1, 2, ~0ull};
  for (int i = 0; i < 9; ++i) p.gradients.push_back(i * 0.5f - 1);
  return p;
}

Bytes EncodePush(const PushRequest& p) {
  Bytes b(PushRequestSize(p.keys.size(), p.dim));
  EXPECT_TRUE(EncodePushRequest(p, b).ok());
  return b;
}

TEST(Wire, FetchRequestRoundTrip) {
  FetchRequest r{7, {5, 6, 1ull << 60}};
  Bytes b(FetchRequestSize(3));
  ASSERT_TRUE(EncodeFetchRequest(r, b).ok());
  EXPECT_EQ(PeekMessageType(b).value(), MessageType::kFetchRequest);
  Result<FetchRequest> d = DecodeFetchRequest(b);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->table_id, 7u);
  EXPECT_EQ(d->keys, r.keys);
  // The encoder insists on the exact size.
  Bytes wrong(b.size() + 1);
  EXPECT_EQ(EncodeFetchRequest(r, wrong).code(), StatusCode::kInvalidArgument);
}

// The bound a server checks before allocating a reply: exactly kMaxValuesPerMessage values pass,
// one row more does not, and neither does a key count above kMaxKeysPerMessage or a bad dim.
TEST(Wire, FetchResponseBoundsAreCheckedFromCountsAlone) {
  EXPECT_TRUE(CheckFetchResponseBounds(kMaxValuesPerMessage / 256, 256).ok());
  EXPECT_EQ(CheckFetchResponseBounds(kMaxValuesPerMessage / 256 + 1, 256).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckFetchResponseBounds(8u << 20, 256).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckFetchResponseBounds(kMaxKeysPerMessage + 1, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckFetchResponseBounds(kMaxKeysPerMessage, 1).ok());
  EXPECT_EQ(CheckFetchResponseBounds(1, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckFetchResponseBounds(1, kMaxDim + 1).code(), StatusCode::kInvalidArgument);
}

TEST(Wire, FetchResponseIsWrittenInPlaceAndReadWithoutCopy) {
  Bytes b(FetchResponseSize(2, 3));
  ASSERT_TRUE(EncodeFetchResponseHeader(9, 3, 2, b).ok());
  std::span<std::byte> values = FetchResponseValues(b);
  ASSERT_EQ(values.size(), 2 * 3 * sizeof(float));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values.data()) - reinterpret_cast<uintptr_t>(b.data()),
            24u);  // 8-byte aligned within the message
  const float rows[6] = {1, 2, 3, 4, 5, 6};
  std::memcpy(values.data(), rows, sizeof rows);
  Result<FetchResponseView> v = DecodeFetchResponse(b);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->table_id(), 9u);
  EXPECT_EQ(v->dim(), 3u);
  EXPECT_EQ(v->key_count(), 2u);
  EXPECT_EQ(v->value(1, 2), 6.0f);
  EXPECT_EQ(v->value_bytes().data(), b.data() + 24) << "a view, not a copy";
  float row[3];
  v->CopyRow(1, row);
  EXPECT_EQ(row[0], 4.0f);
}

TEST(Wire, PushAckForwardAndErrorRoundTrip) {
  PushRequest p = SamplePush();
  Result<PushRequest> d = DecodePushRequest(EncodePush(p));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->id, p.id);
  EXPECT_EQ(d->table_id, p.table_id);
  EXPECT_EQ(d->dim, p.dim);
  EXPECT_EQ(d->keys, p.keys);
  EXPECT_EQ(d->gradients, p.gradients);

  Bytes ab(PushAckSize());
  ASSERT_TRUE(EncodePushAck(PushAck{p.id, true}, ab).ok());
  Result<PushAck> ack = DecodePushAck(ab);
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->id, p.id);
  EXPECT_TRUE(ack->duplicate);
  EXPECT_FALSE(ack->session_expired);

  // An expired session: not applied, and the generation a new session needs.
  ASSERT_TRUE(
      EncodePushAck(PushAck{.id = p.id, .session_expired = true, .min_generation = 1234}, ab).ok());
  ack = DecodePushAck(ab);
  ASSERT_TRUE(ack.ok()) << ack.status().ToString();
  EXPECT_TRUE(ack->session_expired);
  EXPECT_FALSE(ack->duplicate);
  EXPECT_EQ(ack->min_generation, 1234u);
  EXPECT_FALSE(
      EncodePushAck(PushAck{.id = p.id, .duplicate = true, .session_expired = true}, ab).ok());
  ab[8 + 16] = std::byte{3};  // the flags byte (after header and id): both set
  EXPECT_EQ(DecodePushAck(ab).status().code(), StatusCode::kDataLoss);

  // The key travels with the push, and a client moves an unsent push to a new session in place.
  p.client_key = 0x5eed;
  Bytes pb = EncodePush(p);
  ASSERT_TRUE(RestampPushRequest(pb, PushId{99, 3}, 0xbeef).ok());
  d = DecodePushRequest(pb);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->id, (PushId{99, 3}));
  EXPECT_EQ(d->client_key, 0xbeefu);
  EXPECT_EQ(d->gradients, p.gradients);
  EXPECT_FALSE(RestampPushRequest(pb, PushId{99, 0}, 1).ok());
  Bytes short_push(pb.begin(), pb.begin() + 20);
  EXPECT_FALSE(RestampPushRequest(short_push, PushId{99, 3}, 1).ok());

  ForwardedPush f{5, 77, p};
  Bytes fb(ForwardedPushSize(p.keys.size(), p.dim));
  ASSERT_TRUE(EncodeForwardedPush(f, fb).ok());
  Result<ForwardedPush> fd = DecodeForwardedPush(fb);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_EQ(fd->epoch, 5u);
  EXPECT_EQ(fd->lsn, 77u);
  EXPECT_EQ(fd->push.gradients, p.gradients);
  EXPECT_EQ(fd->push.stamp_ms, 0u);

  // A stamped forward (a shard with tables that expire rows) carries the primary's stamp after
  // the lsn, flagged in the header; an unstamped one is byte for byte what it was before stamps,
  // and a peer that predates them refuses the flag rather than misreading the stamp as keys.
  ForwardedPush stamped{5, 77, p};
  stamped.push.stamp_ms = 1'700'000'000'123;
  Bytes sb(ForwardSize(stamped.push));
  EXPECT_EQ(sb.size(), fb.size() + 8);
  ASSERT_TRUE(EncodeForwardedPush(stamped, sb).ok());
  Result<ForwardedPush> sd = DecodeForwardedPush(sb);
  ASSERT_TRUE(sd.ok()) << sd.status().ToString();
  EXPECT_EQ(sd->push.stamp_ms, 1'700'000'000'123u);
  EXPECT_EQ(sd->push.keys, p.keys);
  EXPECT_EQ(sd->push.gradients, p.gradients);
  EXPECT_EQ(sb[6], std::byte{1}) << "flag bit 0 of the reserved u16";
  EXPECT_EQ(fb[6], std::byte{0});
  Bytes other_flag = sb;
  other_flag[6] = std::byte{2};
  EXPECT_FALSE(DecodeForwardedPush(other_flag).ok());
  Bytes zero_stamp = sb;
  std::memset(zero_stamp.data() + 24, 0, 8);
  EXPECT_FALSE(DecodeForwardedPush(zero_stamp).ok());
  Bytes truncated(sb.begin(), sb.begin() + 28);
  EXPECT_FALSE(DecodeForwardedPush(truncated).ok());

  Status error = NotFound("no table 12");
  Bytes eb(ErrorMessageSize(error));
  ASSERT_TRUE(EncodeErrorMessage(error, eb).ok());
  Status back = DecodeErrorMessage(eb);
  EXPECT_EQ(back.code(), StatusCode::kNotFound);
  EXPECT_EQ(back.message(), "no table 12");
}

TEST(Wire, EncodersRefuseWhatDecodersWouldRefuse) {
  PushRequest p = SamplePush();
  p.gradients.pop_back();
  Bytes b(PushRequestSize(p.keys.size(), p.dim));
  EXPECT_EQ(EncodePushRequest(p, b).code(), StatusCode::kInvalidArgument);
  p = SamplePush();
  p.id.sequence = 0;
  EXPECT_EQ(EncodePushRequest(p, b).code(), StatusCode::kInvalidArgument);
}

// Every message, cut at every length and with every single byte flipped, must decode to a
// Status or (for flips in payload bytes) a value — never crash or read out of bounds.
TEST(Wire, TruncatedAndMutatedMessagesAreRejectedSafely) {
  std::vector<Bytes> messages;
  messages.push_back(EncodePush(SamplePush()));
  {
    Bytes b(FetchRequestSize(2));
    ASSERT_TRUE(EncodeFetchRequest(FetchRequest{1, {1, 2}}, b).ok());
    messages.push_back(b);
    Bytes r(FetchResponseSize(2, 2));
    ASSERT_TRUE(EncodeFetchResponseHeader(1, 2, 2, r).ok());
    messages.push_back(r);
    Bytes a(PushAckSize());
    ASSERT_TRUE(EncodePushAck(PushAck{{1, 2}, false}, a).ok());
    messages.push_back(a);
    PushRequest p = SamplePush();
    Bytes f(ForwardedPushSize(p.keys.size(), p.dim));
    ASSERT_TRUE(EncodeForwardedPush(ForwardedPush{1, 1, p}, f).ok());
    messages.push_back(f);
    Status s = Aborted("x");
    Bytes e(ErrorMessageSize(s));
    ASSERT_TRUE(EncodeErrorMessage(s, e).ok());
    messages.push_back(e);
  }
  auto decode_all = [](std::span<const std::byte> b) {
    // Every decoder on every input: only the matching one may succeed on an intact message.
    int ok = 0;
    ok += DecodeFetchRequest(b).ok();
    ok += DecodeFetchResponse(b).ok();
    ok += DecodePushRequest(b).ok();
    ok += DecodePushAck(b).ok();
    ok += DecodeForwardedPush(b).ok();
    ok += DecodeErrorMessage(b).code() != StatusCode::kDataLoss;
    (void)PeekMessageType(b);
    return ok;
  };
  for (const Bytes& m : messages) {
    EXPECT_EQ(decode_all(m), 1);
    for (size_t n = 0; n < m.size(); ++n) {
      // A copy of exactly n bytes, so ASan sees any read past the end.
      Bytes cut(m.begin(), m.begin() + n);
      EXPECT_EQ(decode_all(cut), 0) << "truncated to " << n << " of " << m.size();
    }
    Bytes longer = m;
    longer.push_back(std::byte{0});
    EXPECT_EQ(decode_all(longer), 0) << "a trailing byte must be rejected";
    for (size_t i = 0; i < m.size(); ++i) {
      for (uint8_t bit = 1; bit != 0; bit <<= 1) {
        Bytes flipped = m;
        flipped[i] ^= std::byte{bit};
        EXPECT_LE(decode_all(flipped), 1);
      }
    }
  }
}

// A row width outside a table's 1..kMaxDim is refused on both sides. Dim 0 let a fetch
// response of n keys through with no values, and its empty rows reached memcpy as a null
// pointer in the client (fuzz_ps_wire found it); a dim of 2^28 with no keys made a reader that
// sizes one row from it allocate a gigabyte.
TEST(Wire, DimOutsideATablesRangeIsRefused) {
  for (const uint32_t dim : {0u, kMaxDim + 1, 1u << 28}) {
    SCOPED_TRACE(dim);
    Bytes r(FetchResponseSize(0, 4));
    ASSERT_TRUE(EncodeFetchResponseHeader(1, 4, 0, r).ok());
    const uint64_t keys = dim == 0 ? 30 : 0;  // dim 0: any key count has 0 value bytes
    std::memcpy(r.data() + 12, &dim, 4);
    std::memcpy(r.data() + 16, &keys, 8);
    EXPECT_EQ(DecodeFetchResponse(r).status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(EncodeFetchResponseHeader(1, dim, 0, r).code(), StatusCode::kInvalidArgument);

    PushRequest p = SamplePush();
    p.dim = dim;
    p.keys.clear();
    p.gradients.clear();
    Bytes b(PushRequestSize(0, dim));
    EXPECT_EQ(EncodePushRequest(p, b).code(), StatusCode::kInvalidArgument);
    Bytes valid = EncodePush(SamplePush());
    Bytes empty(valid.begin(), valid.begin() + PushRequestSize(0, 3));
    const uint64_t no_keys = 0;
    std::memcpy(empty.data() + 28, &dim, 4);
    std::memcpy(empty.data() + 32, &no_keys, 8);
    EXPECT_EQ(DecodePushRequest(empty).status().code(), StatusCode::kDataLoss);
  }
}

TEST(Wire, HugeCountsDoNotOverflowOrAllocate) {
  Bytes b = EncodePush(SamplePush());
  // key count at offset 8 + 24: claim 2^62 keys of dim 2^31.
  const uint64_t count = 1ull << 62;
  const uint32_t dim = 1u << 31;
  std::memcpy(b.data() + 32, &count, 8);
  std::memcpy(b.data() + 28, &dim, 4);
  EXPECT_EQ(DecodePushRequest(b).status().code(), StatusCode::kDataLoss);
  // Counts whose byte total wraps around 2^64 to the real body size.
  const uint64_t wrap = (1ull << 61) + 0;  // 8 * 2^61 == 2^64 == 0 bytes of keys
  std::memcpy(b.data() + 32, &wrap, 8);
  EXPECT_EQ(DecodePushRequest(b).status().code(), StatusCode::kDataLoss);

  Bytes r(FetchResponseSize(0, 4));
  ASSERT_TRUE(EncodeFetchResponseHeader(1, 4, 0, r).ok());
  const uint64_t many = 1ull << 40;
  std::memcpy(r.data() + 16, &many, 8);
  EXPECT_EQ(DecodeFetchResponse(r).status().code(), StatusCode::kDataLoss);
}

TEST(Wire, RandomBytesNeverDecodeOutOfBounds) {
  Rng rng(99);
  for (int i = 0; i < 20000; ++i) {
    Bytes b(rng.Below(96));
    for (auto& x : b) x = static_cast<std::byte>(rng.Next());
    if (b.size() >= 8 && rng.Below(2)) {  // a valid header makes the body checks run
      const uint32_t magic = 0x53505842;
      std::memcpy(b.data(), &magic, 4);
      b[4] = std::byte{1};
      b[5] = static_cast<std::byte>(1 + rng.Below(6));
      b[6] = b[7] = std::byte{0};
    }
    (void)DecodeFetchRequest(b);
    (void)DecodeFetchResponse(b);
    (void)DecodePushRequest(b);
    (void)DecodePushAck(b);
    (void)DecodeForwardedPush(b);
    (void)DecodeErrorMessage(b);
  }
}

}  // namespace
}  // namespace bx::ps
