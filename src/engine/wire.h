// What engines say to each other on the wire.
//
// Every SEND and WRITE_WITH_IMM carries a 32-bit immediate:
//   bits 31..28  kind (Kind below)
//   bits 27..16  credits returned to the peer (piggybacked receive credits, 0..4095)
//   bits 15..0   message id (rendezvous) or 0
// Keeping all metadata in the immediate means an eager receive buffer holds exactly the message,
// so it can be handed to the application as is, with no header to strip and no copy.
#pragma once

#include <cstdint>

namespace bx::engine {

enum class Kind : uint8_t {
  kEager = 1,              // SEND_WITH_IMM: the payload is the whole message
  kRendezvousRequest = 2,  // SEND_WITH_IMM: payload RendezvousRequest
  kRendezvousReply = 3,    // SEND_WITH_IMM: payload RendezvousReply
  kRendezvousDone = 4,     // WRITE_WITH_IMM: the last fragment of message `id` has landed
  kCredit = 5,             // SEND_WITH_IMM, no payload: credits only
  kRemoteWriteDone = 6,    // WRITE_WITH_IMM: a write into a buffer known in advance, tag `id`
};

inline constexpr uint32_t kMaxCreditsPerImm = 0xfff;

struct Imm {
  Kind kind;
  uint16_t credits;
  uint16_t id;
};

inline uint32_t EncodeImm(const Imm& imm) {
  return (uint32_t(imm.kind) << 28) | (uint32_t(imm.credits & kMaxCreditsPerImm) << 16) | imm.id;
}

inline Imm DecodeImm(uint32_t host_order) {
  return Imm{Kind(host_order >> 28), uint16_t((host_order >> 16) & kMaxCreditsPerImm),
             uint16_t(host_order & 0xffff)};
}

// The sender announces a large message; the receiver allocates its destination.
struct RendezvousRequest {
  uint64_t size;
};

// The receiver's answer: where to write message `id` (the id travels in the immediate).
struct RendezvousReply {
  uint64_t addr;
  uint32_t rkey;
  uint32_t reserved;
};

}  // namespace bx::engine
