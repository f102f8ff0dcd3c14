// The RDMA connection handshake, over a TCP "bootstrap" connection (as brpc and rc_pingpong do):
//
//   client -> server  Hello   (its QP number, GID, receive depth, eager limit, max message)
//   server -> client  Hello   (the same for the server; the server's QP is in RTS by now)
//   client -> server  kReady  (the client's QP is in RTS: the server may start sending)
//
// After that the connection stays open and silent; its end (EOF, reset) tells either side that
// the peer process is gone, which the RC QP alone would notice only on its next send.
//
// Hello is 64 bytes, little-endian, fixed layout. A peer that sends anything else (wrong magic,
// unknown version, sizes out of range) is refused with a message that says what was wrong.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "bx/status.h"
#include "verbs/verbs.h"

namespace bx::rdma {

inline constexpr uint32_t kHelloMagic = 0x31524842;  // "BHR1" little-endian
inline constexpr uint16_t kProtocolVersion = 2;      // 2: channels (QP multiplexing)
inline constexpr uint8_t kReady = 0x52;              // 'R'

struct Hello {
  uint32_t qp_num = 0;
  ibv_gid gid{};
  uint32_t recv_queue_depth = 0;  // the credits the peer starts with
  uint32_t eager_limit = 0;       // its receive buffer size
  uint64_t max_message_bytes = 0;
  uint32_t psn = 0;  // its first send PSN
};

// Bounds a peer's Hello must respect; anything outside is a malformed or hostile peer.
inline constexpr uint32_t kMaxRecvQueueDepth = 16384;
inline constexpr uint32_t kMinEagerLimit = 64;
inline constexpr uint32_t kMaxEagerLimit = 16u << 20;

// Serialises and sends `hello` on the blocking socket `fd`.
Status SendHello(int fd, const Hello& hello);
// Receives and validates a Hello, waiting at most `timeout`.
Result<Hello> ReceiveHello(int fd, std::chrono::milliseconds timeout);
// Encoding, exposed for tests (the fuzz test feeds ReceiveHello malformed bytes).
void EncodeHello(const Hello& hello, uint8_t out[64]);
Result<Hello> DecodeHello(const uint8_t in[64]);

Status SendReady(int fd);
Status ReceiveReady(int fd, std::chrono::milliseconds timeout);

}  // namespace bx::rdma
