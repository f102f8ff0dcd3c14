#include "transport/rdma/bootstrap.h"

#include <cstring>

#include "base/wire_encoding.h"
#include "transport/blocking_io.h"

namespace bx::rdma {
namespace {

// Layout of the 64-byte Hello:
//   0 magic u32 | 4 version u16 | 6 flags u16 | 8 qp_num u32 | 12 psn u32 | 16 gid[16]
//   32 recv_queue_depth u32 | 36 eager_limit u32 | 40 max_message_bytes u64 | 48 lid u16
//   50 link_layer u8 | 51 mtu u8 | 52 newest version u16 (from version 5; 0: the same as the
//   version field) | 54 reserved[10]
constexpr size_t kHelloBytes = 64;
constexpr size_t kNewestVersionOffset = 52;

// The start every 64-byte record shares: magic u32, version u16, then a u16 (Hello: flags;
// Challenge: reserved; Refusal: its code). A whole record is there: none of the reads can fail.
struct RecordStart {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t arg = 0;
};
RecordStart GetRecordStart(WireReader& r) {
  RecordStart start;
  r.GetU32(&start.magic);
  r.GetU16(&start.version);
  r.GetU16(&start.arg);
  return start;
}

void PutRecordStart(WireWriter& w, uint32_t magic, uint16_t arg,
                    uint16_t oldest = kProtocolVersions.oldest) {
  w.PutU32(magic);
  w.PutU16(oldest);
  w.PutU16(arg);
}

// A Challenge or Refusal carries only its sender's oldest version: one we cannot speak means
// the sender cannot speak to us either.
Status CheckVersion(uint16_t oldest) {
  if (oldest < 1 || oldest > kProtocolVersions.newest)
    return FailedPrecondition("bootstrap: peer speaks protocol version " + std::to_string(oldest) +
                              " and later, this build speaks " + kProtocolVersions.ToString());
  return Status::Ok();
}

}  // namespace

void EncodeHello(const Hello& h, uint8_t out[64]) {
  EncodeHelloSpeaking(h, kProtocolVersions, out);
}

void EncodeHelloSpeaking(const Hello& h, VersionRange versions, uint8_t out[64]) {
  WireWriter w(std::span<uint8_t>(out, kHelloBytes));
  PutRecordStart(w, kHelloMagic, h.auth ? kHelloFlagAuth : 0, versions.oldest);
  w.PutU32(h.qp_num);
  w.PutU32(h.psn);
  w.PutBytes(h.gid.raw, 16);
  w.PutU32(h.recv_queue_depth);
  w.PutU32(h.eager_limit);
  w.PutU64(h.max_message_bytes);
  w.PutU16(h.lid);
  w.PutU8(h.link_layer);
  w.PutU8(uint8_t(h.mtu));
  w.PutU16(versions.newest > 4 ? versions.newest : 0);  // a version 4 Hello has zeros here
  w.PutZeros(kHelloBytes - w.position());
}

Result<Hello> DecodeHello(const uint8_t in[64]) {
  WireReader r(std::span<const uint8_t>(in, kHelloBytes));
  const RecordStart start = GetRecordStart(r);
  if (start.magic != kHelloMagic)
    return DataLoss("bootstrap: not a bexpress RDMA peer (magic " + std::to_string(start.magic) +
                    ")");
  // The versions first: a peer we cannot speak to is told so, whatever else it sent.
  uint16_t newest = 0;
  WireReader(std::span<const uint8_t>(in + kNewestVersionOffset, 2)).GetU16(&newest);
  BX_ASSIGN_OR_RETURN(const uint16_t version,
                      NegotiateVersion("bootstrap", kProtocolVersions,
                                       {start.version, std::max(start.version, newest)}));
  const uint16_t flags = start.arg;
  if ((flags & ~kHelloFlagAuth) != 0)
    return DataLoss("bootstrap: unknown Hello flags " + std::to_string(flags));
  Hello h;
  h.version = version;
  h.auth = (flags & kHelloFlagAuth) != 0;
  r.GetU32(&h.qp_num);
  r.GetU32(&h.psn);
  h.psn &= 0xffffff;
  r.GetBytes(h.gid.raw, 16);
  r.GetU32(&h.recv_queue_depth);
  r.GetU32(&h.eager_limit);
  r.GetU64(&h.max_message_bytes);
  r.GetU16(&h.lid);
  r.GetU8(&h.link_layer);
  // Checked as a byte before it becomes an ibv_mtu: an enum holding 9 is undefined behaviour.
  uint8_t mtu = 0;
  r.GetU8(&mtu);
  if (h.link_layer != IBV_LINK_LAYER_ETHERNET && h.link_layer != IBV_LINK_LAYER_INFINIBAND)
    return DataLoss("bootstrap: unknown link layer " + std::to_string(h.link_layer));
  if (mtu < uint8_t(IBV_MTU_256) || mtu > uint8_t(IBV_MTU_4096))
    return DataLoss("bootstrap: invalid path MTU code " + std::to_string(mtu));
  h.mtu = ibv_mtu(mtu);
  if (h.link_layer == IBV_LINK_LAYER_INFINIBAND && (h.lid == 0 || h.lid >= 0xc000))
    return DataLoss("bootstrap: InfiniBand peer without a unicast LID (" + std::to_string(h.lid) +
                    ")");
  if (h.qp_num == 0 || h.qp_num > 0xffffff)
    return DataLoss("bootstrap: invalid QP number " + std::to_string(h.qp_num));
  if (h.recv_queue_depth < 2 || h.recv_queue_depth > kMaxRecvQueueDepth)
    return DataLoss("bootstrap: receive queue depth " + std::to_string(h.recv_queue_depth) +
                    " outside 2.." + std::to_string(kMaxRecvQueueDepth));
  if (h.eager_limit < kMinEagerLimit || h.eager_limit > kMaxEagerLimit)
    return DataLoss("bootstrap: eager limit " + std::to_string(h.eager_limit) + " outside " +
                    std::to_string(kMinEagerLimit) + ".." + std::to_string(kMaxEagerLimit));
  if (h.max_message_bytes == 0)
    return DataLoss("bootstrap: peer accepts no messages (max_message_bytes = 0)");
  return h;
}

Status SendHello(int fd, const Hello& hello) {
  uint8_t buf[kHelloBytes];
  EncodeHello(hello, buf);
  return transport::WriteAll(fd, buf, sizeof(buf), "hello");
}

Result<Hello> ReceiveHello(int fd, std::chrono::milliseconds timeout, uint8_t* raw) {
  uint8_t buf[kHelloBytes];
  BX_RETURN_IF_ERROR(transport::ReadExactly(fd, buf, sizeof(buf),
                                            std::chrono::steady_clock::now() + timeout, "hello",
                                            "bootstrap connection"));
  if (raw != nullptr) std::memcpy(raw, buf, sizeof(buf));
  return DecodeHello(buf);
}

namespace {

void EncodeRecord(uint32_t magic, uint16_t code, const uint8_t* nonce, uint8_t out[64]) {
  WireWriter w(std::span<uint8_t>(out, kRecordBytes));
  PutRecordStart(w, magic, code);
  if (nonce != nullptr) w.PutBytes(nonce, kNonceBytes);
  w.PutZeros(kRecordBytes - w.position());
}

// Whether what is left of the record is all zero (reserved bytes).
bool RestIsZero(WireReader& r) {
  std::span<const std::byte> rest;
  r.Take(r.remaining(), &rest);
  std::byte any{0};
  for (std::byte b : rest) any |= b;
  return any == std::byte{0};
}

}  // namespace

void EncodeChallenge(const uint8_t nonce[kNonceBytes], uint8_t out[64]) {
  EncodeRecord(kChallengeMagic, 0, nonce, out);
}

void EncodeRefusal(uint16_t code, uint8_t out[64]) {
  EncodeRecord(kRefusalMagic, code, nullptr, out);
}

Result<Reply> DecodeReply(const uint8_t in[64]) {
  WireReader r(std::span<const uint8_t>(in, kRecordBytes));
  const RecordStart start = GetRecordStart(r);
  Reply reply;
  if (start.magic == kHelloMagic) {
    BX_ASSIGN_OR_RETURN(reply.hello, DecodeHello(in));
    return reply;
  }
  if (start.magic != kChallengeMagic && start.magic != kRefusalMagic)
    return DataLoss("bootstrap: not a bexpress RDMA peer (magic " + std::to_string(start.magic) +
                    ")");
  BX_RETURN_IF_ERROR(CheckVersion(start.version));
  const uint16_t code = start.arg;
  if (start.magic == kChallengeMagic) {
    r.GetBytes(reply.nonce, kNonceBytes);
    if (code != 0 || !RestIsZero(r))
      return DataLoss("bootstrap: malformed challenge (non-zero reserved bytes)");
    reply.kind = Reply::Kind::kChallenge;
    return reply;
  }
  if (code == 0 || !RestIsZero(r))
    return DataLoss("bootstrap: malformed refusal (code 0 or non-zero reserved bytes)");
  reply.kind = Reply::Kind::kRefusal;
  reply.refusal = code;
  return reply;
}

Status SendReady(int fd) {
  uint8_t b = kReady;
  return transport::WriteAll(fd, &b, 1, "ready");
}

Status ReceiveReady(int fd, std::chrono::milliseconds timeout) {
  uint8_t b = 0;
  BX_RETURN_IF_ERROR(transport::ReadExactly(fd, &b, 1, std::chrono::steady_clock::now() + timeout,
                                            "ready", "bootstrap connection"));
  if (b != kReady) return DataLoss("bootstrap: expected ready, got byte " + std::to_string(b));
  return Status::Ok();
}

}  // namespace bx::rdma
