// The RDMA connection handshake, over a TCP "bootstrap" connection (as brpc and rc_pingpong do).
// Protocol versions 4 and 5 (kProtocolVersions). Without a secret (TransportOptions::auth_secret
// empty on both sides):
//
//   client -> server  Hello   (its QP number, GID, receive depth, eager limit, max message)
//   server -> client  Hello   (the same for the server; the server's QP is in RTS by now)
//   client -> server  kReady  (the client's QP is in RTS: the server may start sending)
//
// With a secret (bootstrap_auth.h has the proofs; transport/auth.h how they are made):
//
//   client -> server  Hello (flag kHelloFlagAuth) + client nonce (32 bytes)
//   server -> client  Challenge (64 bytes: server nonce)               <- no QP on the server yet
//   client -> server  client proof (32 bytes)
//   server            verifies; only now creates the QP, engine and buffers
//   server -> client  Hello (flag kHelloFlagAuth) + server proof (32 bytes)
//   client            verifies the server's proof before using its Hello
//   client -> server  kReady
//
// Instead of a Hello or a Challenge the server may send a Refusal (64 bytes: a reason code,
// transport/auth.h) and close: authentication failed or was not configured on both sides, or
// the peer's address holds max_connections_per_peer already. The client reports the reason.
//
// After that the connection stays open and silent; its end (EOF, reset) tells either side that
// the peer process is gone, which the RC QP alone would notice only on its next send.
//
// The Hello says how to reach the sender's QP on its link layer: a RoCE peer by GID, an
// InfiniBand peer by LID (and by GID across subnets). Peers on different link layers cannot
// reach each other, and each side refuses the other's Hello saying so.
//
// Hello, Challenge and Refusal are 64 bytes, little-endian, fixed layout, told apart by their
// magic. A peer that sends anything else (wrong magic, unknown flags, sizes out of range) is
// refused with a message that says what was wrong.
//
// Versions: every record's version field is the oldest version its sender speaks, and a Hello
// from version 5 on also says the newest (bytes 52-53; a version 4 peer leaves them zero). Each
// side uses the highest version both speak (Hello::version). A peer whose window does not meet
// ours is refused with Refusal::kVersion, which names both windows. Version 4 peers accept a
// version 5 Hello: they check the version field and not the bytes reserved after the MTU.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/wire_version.h"
#include "bx/status.h"
#include "verbs/verbs.h"

namespace bx::rdma {

inline constexpr uint32_t kHelloMagic = 0x31524842;      // "BHR1" little-endian
inline constexpr uint32_t kChallengeMagic = 0x43524842;  // "BHRC"
inline constexpr uint32_t kRefusalMagic = 0x58524842;    // "BHRX"
// 2: channels (QP multiplexing); 3: authentication (Hello flags, Challenge, Refusal);
// 4: addressing (LID, link layer and MTU in the Hello; random PSNs); 5: the Hello says the
// newest version its sender speaks (a compatibility window: rolling upgrades).
inline constexpr VersionRange kProtocolVersions{4, 5};
inline constexpr uint8_t kReady = 0x52;        // 'R'
inline constexpr size_t kRecordBytes = 64;     // Hello, Challenge, Refusal
inline constexpr size_t kNonceBytes = 32;      // after an authenticating Hello; in a Challenge
inline constexpr size_t kProofBytes = 32;      // HMAC-SHA256
inline constexpr uint16_t kHelloFlagAuth = 1;  // the sender has a secret; a nonce or proof follows

struct Hello {
  uint32_t qp_num = 0;
  ibv_gid gid{};     // its source GID (RoCE), or its port GID (InfiniBand: subnet prefix + GUID)
  uint16_t lid = 0;  // InfiniBand: its port's LID
  uint8_t link_layer = IBV_LINK_LAYER_ETHERNET;
  ibv_mtu mtu = IBV_MTU_1024;     // its port's active MTU: the path uses the smaller of the two
  uint32_t recv_queue_depth = 0;  // the credits the peer starts with
  uint32_t eager_limit = 0;       // its receive buffer size
  uint64_t max_message_bytes = 0;
  uint32_t psn = 0;   // its first send PSN (24 bits, random per connection)
  bool auth = false;  // kHelloFlagAuth: the sender authenticates (a nonce or proof follows)
  // Decoded: the highest version the sender and this build both speak. Not encoded: a Hello
  // always offers kProtocolVersions (EncodeHelloSpeaking for a test's older or newer peer).
  uint16_t version = 0;
};

// Bounds a peer's Hello must respect; anything outside is a malformed or hostile peer.
inline constexpr uint32_t kMaxRecvQueueDepth = 16384;
inline constexpr uint32_t kMinEagerLimit = 64;
inline constexpr uint32_t kMaxEagerLimit = 16u << 20;

// Serialises and sends `hello` on the blocking socket `fd`.
Status SendHello(int fd, const Hello& hello);
// Receives and validates a Hello, waiting at most `timeout`; when `raw` is given, the 64 bytes
// as received go there (the peer's proof covers them).
Result<Hello> ReceiveHello(int fd, std::chrono::milliseconds timeout, uint8_t* raw = nullptr);
// Encoding, exposed for tests (the fuzz test feeds ReceiveHello malformed bytes).
void EncodeHello(const Hello& hello, uint8_t out[64]);
// A Hello as a peer speaking `versions` sends it (a version 4 peer: {4, 4}).
void EncodeHelloSpeaking(const Hello& hello, VersionRange versions, uint8_t out[64]);
// FailedPrecondition when the sender's versions do not meet this build's (answer
// Refusal::kVersion); DataLoss when the record is malformed.
Result<Hello> DecodeHello(const uint8_t in[64]);

// What the server sends in place of a Hello: its Hello, a Challenge or a Refusal.
struct Reply {
  enum class Kind { kHello, kChallenge, kRefusal } kind = Kind::kHello;
  Hello hello;                   // kHello
  uint8_t nonce[kNonceBytes]{};  // kChallenge
  uint16_t refusal = 0;          // kRefusal: a transport::auth::Refusal code
};
// Challenge layout: 0 magic | 4 version u16 | 6 reserved u16 (0) | 8 nonce[32] | 40 zero[24].
// Refusal layout:   0 magic | 4 version u16 | 6 code u16 (non-zero) | 8 zero[56].
void EncodeChallenge(const uint8_t nonce[kNonceBytes], uint8_t out[64]);
void EncodeRefusal(uint16_t code, uint8_t out[64]);
// Decodes any of the three; a malformed record is DataLoss saying what is wrong.
Result<Reply> DecodeReply(const uint8_t in[64]);

Status SendReady(int fd);
Status ReceiveReady(int fd, std::chrono::milliseconds timeout);

}  // namespace bx::rdma
