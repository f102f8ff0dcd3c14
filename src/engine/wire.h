// What engines say to each other on the wire.
//
// Every SEND and WRITE_WITH_IMM carries a 32-bit immediate:
//   bits 31..28  kind (Kind below)
//   bits 27..16  credits returned to the peer (piggybacked receive credits, 0..4095)
//   bits 15..0   channel (the logical socket) or rendezvous id, as the kind says
// Keeping all metadata in the immediate means an eager receive buffer holds exactly the message,
// so it can be handed to the application as is, with no header to strip and no copy.
//
// Channels: the sockets multiplexed over one engine (paper section 6.1). The connecting side
// numbers them and opens them; the accepting side answers kChannelAccept, or kChannelClose to
// refuse. Both sides end a channel with kChannelClose, and an id is reused only after each
// side has both sent and received the close, so a late close can never hit a newer channel.
#pragma once

#include <cstdint>

namespace bx::engine {

using ChannelId = uint16_t;
// Ids 0..kMaxChannels-1; rendezvous ids are 1..65535, so there is always a free one.
inline constexpr uint32_t kMaxChannels = 65535;

enum class Kind : uint8_t {
  kEager = 1,              // SEND_WITH_IMM, id = channel: the payload is the whole message
  kRendezvousRequest = 2,  // SEND_WITH_IMM, id = rendezvous id: payload RendezvousRequest
  kRendezvousReply = 3,    // SEND_WITH_IMM, id = rendezvous id: payload RendezvousReply
  kRendezvousDone = 4,     // WRITE_WITH_IMM, id = rendezvous id: the last fragment has landed
  kCredit = 5,             // SEND_WITH_IMM, no payload: credits only
  kRemoteWriteDone = 6,    // SEND_WITH_IMM after the writes: payload RemoteWriteDone
  kChannelOpen = 7,        // SEND_WITH_IMM, id = channel, no payload
  kChannelClose = 8,       // SEND_WITH_IMM, id = channel, no payload
  kChannelAccept = 9,      // SEND_WITH_IMM, id = channel: the accepting side took the channel
  kRendezvousAbort = 10,   // SEND_WITH_IMM, id = rendezvous id: the sender's socket closed
                           // mid-message; drop the destination (sent after the fragments)
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

// The sender announces a large message on `channel`; the receiver allocates its destination.
struct RendezvousRequest {
  uint64_t size;
  uint16_t channel;
  uint16_t reserved[3];
};

// The receiver's answer: where to write message `id` (the id travels in the immediate).
struct RendezvousReply {
  uint64_t addr;
  uint32_t rkey;
  uint32_t reserved;
};

// A write into a buffer the peer described out of band has landed (sent after its last WRITE;
// RC ordering puts every byte in memory before this SEND completes at the receiver).
struct RemoteWriteDone {
  uint16_t channel;
  uint16_t tag;
  uint32_t reserved;
};

// The payloads are sent inline as they are laid out here: both ends must agree on every byte.
static_assert(sizeof(RendezvousRequest) == 16 && sizeof(RendezvousReply) == 16 &&
              sizeof(RemoteWriteDone) == 8);
// Inline sends ask the device for 64 bytes (the transport's max_inline_data): every payload fits.
inline constexpr uint32_t kMaxInlinePayloadBytes = 64;
static_assert(sizeof(RendezvousRequest) <= kMaxInlinePayloadBytes &&
              sizeof(RendezvousReply) <= kMaxInlinePayloadBytes &&
              sizeof(RemoteWriteDone) <= kMaxInlinePayloadBytes);

}  // namespace bx::engine
