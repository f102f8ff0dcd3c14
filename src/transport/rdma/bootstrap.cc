#include "transport/rdma/bootstrap.h"

#include <endian.h>

#include <cstring>

#include "transport/blocking_io.h"

namespace bx::rdma {
namespace {

// Layout of the 64-byte Hello:
//   0 magic u32 | 4 version u16 | 6 flags u16 | 8 qp_num u32 | 12 psn u32 | 16 gid[16]
//   32 recv_queue_depth u32 | 36 eager_limit u32 | 40 max_message_bytes u64 | 48 lid u16
//   50 link_layer u8 | 51 mtu u8 | 52 reserved[12]
constexpr size_t kHelloBytes = 64;

void Put32(uint8_t* p, uint32_t v) {
  v = htole32(v);
  std::memcpy(p, &v, 4);
}
void Put64(uint8_t* p, uint64_t v) {
  v = htole64(v);
  std::memcpy(p, &v, 8);
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return le32toh(v);
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return le64toh(v);
}

}  // namespace

void EncodeHello(const Hello& h, uint8_t out[64]) {
  std::memset(out, 0, kHelloBytes);
  Put32(out + 0, kHelloMagic);
  uint16_t version = htole16(kProtocolVersion);
  std::memcpy(out + 4, &version, 2);
  uint16_t flags = htole16(h.auth ? kHelloFlagAuth : 0);
  std::memcpy(out + 6, &flags, 2);
  Put32(out + 8, h.qp_num);
  Put32(out + 12, h.psn);
  std::memcpy(out + 16, h.gid.raw, 16);
  Put32(out + 32, h.recv_queue_depth);
  Put32(out + 36, h.eager_limit);
  Put64(out + 40, h.max_message_bytes);
  uint16_t lid = htole16(h.lid);
  std::memcpy(out + 48, &lid, 2);
  out[50] = h.link_layer;
  out[51] = uint8_t(h.mtu);
}

Result<Hello> DecodeHello(const uint8_t in[64]) {
  uint32_t magic = Get32(in);
  if (magic != kHelloMagic)
    return DataLoss("bootstrap: not a bexpress RDMA peer (magic " + std::to_string(magic) + ")");
  uint16_t version;
  std::memcpy(&version, in + 4, 2);
  version = le16toh(version);
  if (version != kProtocolVersion)
    return FailedPrecondition("bootstrap: peer speaks protocol version " + std::to_string(version) +
                              ", this build speaks " + std::to_string(kProtocolVersion));
  uint16_t flags;
  std::memcpy(&flags, in + 6, 2);
  flags = le16toh(flags);
  if ((flags & ~kHelloFlagAuth) != 0)
    return DataLoss("bootstrap: unknown Hello flags " + std::to_string(flags));
  Hello h;
  h.auth = (flags & kHelloFlagAuth) != 0;
  h.qp_num = Get32(in + 8);
  h.psn = Get32(in + 12) & 0xffffff;
  std::memcpy(h.gid.raw, in + 16, 16);
  h.recv_queue_depth = Get32(in + 32);
  h.eager_limit = Get32(in + 36);
  h.max_message_bytes = Get64(in + 40);
  uint16_t lid;
  std::memcpy(&lid, in + 48, 2);
  h.lid = le16toh(lid);
  h.link_layer = in[50];
  // Checked as a byte before it becomes an ibv_mtu: an enum holding 9 is undefined behaviour.
  const uint8_t mtu = in[51];
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
  std::memset(out, 0, kRecordBytes);
  Put32(out, magic);
  uint16_t version = htole16(kProtocolVersion);
  std::memcpy(out + 4, &version, 2);
  code = htole16(code);
  std::memcpy(out + 6, &code, 2);
  if (nonce != nullptr) std::memcpy(out + 8, nonce, kNonceBytes);
}

bool AllZero(const uint8_t* p, size_t n) {
  uint8_t any = 0;
  for (size_t i = 0; i < n; ++i) any |= p[i];
  return any == 0;
}

}  // namespace

void EncodeChallenge(const uint8_t nonce[kNonceBytes], uint8_t out[64]) {
  EncodeRecord(kChallengeMagic, 0, nonce, out);
}

void EncodeRefusal(uint16_t code, uint8_t out[64]) {
  EncodeRecord(kRefusalMagic, code, nullptr, out);
}

Result<Reply> DecodeReply(const uint8_t in[64]) {
  uint32_t magic = Get32(in);
  Reply reply;
  if (magic == kHelloMagic) {
    BX_ASSIGN_OR_RETURN(reply.hello, DecodeHello(in));
    return reply;
  }
  if (magic != kChallengeMagic && magic != kRefusalMagic)
    return DataLoss("bootstrap: not a bexpress RDMA peer (magic " + std::to_string(magic) + ")");
  uint16_t version, code;
  std::memcpy(&version, in + 4, 2);
  std::memcpy(&code, in + 6, 2);
  version = le16toh(version);
  code = le16toh(code);
  if (version != kProtocolVersion)
    return FailedPrecondition("bootstrap: peer speaks protocol version " + std::to_string(version) +
                              ", this build speaks " + std::to_string(kProtocolVersion));
  if (magic == kChallengeMagic) {
    if (code != 0 || !AllZero(in + 40, 24))
      return DataLoss("bootstrap: malformed challenge (non-zero reserved bytes)");
    reply.kind = Reply::Kind::kChallenge;
    std::memcpy(reply.nonce, in + 8, kNonceBytes);
    return reply;
  }
  if (code == 0 || !AllZero(in + 8, 56))
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
