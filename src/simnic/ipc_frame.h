// The framing of the simnic's fabric links (ipc_link.cc): a connection opens with the fabric's
// cookie (kIpcCookieBytes), then each frame is an IpcHeader and header.payload_length bytes.
// IpcFrameParser reads one peer's stream as a pure state machine, so that it can be fuzzed
// (fuzz/simnic_frame_fuzz.cc) and so that the reader thread never waits on one peer: it receives
// straight into Next() whatever the socket has, and Commit() completes frames.
//
// A header is checked before anything is allocated for it (CheckIpcHeader), and a payload grows
// as its bytes arrive (up to 1 MiB at once, then fourfold), so a header costs the reader what the
// peer has sent, not what it announced.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace bx::simnic {

struct IpcHeader {
  uint32_t magic;
  uint8_t kind;  // kRequest or kReply
  uint8_t opcode;
  uint8_t reply;
  uint8_t rnr_timer;
  uint32_t src_pid;
  uint32_t dest_device;
  uint32_t dest_qpn;
  uint32_t src_device;
  uint32_t src_qpn;
  uint32_t psn;
  uint32_t imm_data;
  uint32_t rkey;
  uint32_t solicited;
  uint64_t remote_addr;
  uint32_t length;
  uint32_t payload_length;
  uint8_t src_gid[16];
  // Datagrams (kIpcDatagram) only: what the receiver's completion and GRH show.
  uint8_t dest_gid[16];
  uint32_t qkey;
  uint32_t flow_label;
  uint16_t src_lid;
  uint8_t sl;
  uint8_t traffic_class;
  uint8_t hop_limit;
  uint8_t global;  // a GRH was sent
  uint8_t reserved[2];
};

inline constexpr uint32_t kIpcMagic = 0xb5e1c0de;
inline constexpr uint8_t kIpcRequest = 1;
inline constexpr uint8_t kIpcReply = 2;
inline constexpr uint8_t kIpcDatagram = 3;  // UD: unanswered
// A datagram carries at most one MTU (4096 is the largest IB MTU).
inline constexpr uint32_t kIpcMaxDatagram = 4096;
// No frame carries more than the largest RC message (2 GiB, sim_objects.h's kMaxMsgSize).
inline constexpr uint32_t kIpcMaxPayload = 1u << 31;

// The per-fabric cookie every connection opens with: BX_SIM_FABRIC_COOKIE, zero-padded to 32
// bytes (longer values are cut there), all zeros when unset. Only processes given the same
// cookie share a fabric, so another program of the same user that does not know it is refused.
inline constexpr size_t kIpcCookieBytes = 32;
using IpcCookie = std::array<uint8_t, kIpcCookieBytes>;
IpcCookie MakeIpcCookie(std::string_view text);

struct IpcFrame {
  IpcHeader header;
  std::vector<uint8_t> payload;
};

// Why a header from the process `peer_pid` (whose connection the kernel vouched for) must be
// refused, or empty when it may be read: a wrong magic, a sender that is not the peer, an
// unknown kind, a payload above kIpcMaxPayload.
std::string_view CheckIpcHeader(const IpcHeader& header, uint32_t peer_pid);

class IpcFrameParser {
 public:
  IpcFrameParser(uint32_t peer_pid, const IpcCookie& cookie)
      : peer_pid_(peer_pid), cookie_(cookie) {}

  // Where the peer's next bytes go: the rest of the cookie, of a header, or of a payload (at most
  // the part the payload has grown to). Empty once the stream is refused.
  std::span<uint8_t> Next();
  // `n` bytes (at most Next().size()) were written at Next(). Appends each frame completed to
  // *frames. False once the stream is refused (error() says why); it stays refused.
  bool Commit(size_t n, std::vector<IpcFrame>* frames);

  std::string_view error() const { return error_; }
  uint32_t peer_pid() const { return peer_pid_; }
  // The stream was refused as not a fabric peer's: a wrong cookie, or a header naming another
  // process as its sender. Its end must not be taken for the peer going away.
  bool impostor() const { return impostor_; }
  // Bytes held for the frame being read (its payload's capacity): what the peer costs now.
  size_t held_bytes() const { return frame_.payload.capacity(); }

 private:
  const uint32_t peer_pid_;
  const IpcCookie cookie_;
  IpcCookie cookie_seen_{};
  size_t cookie_have_ = 0;  // bytes of cookie_seen_ received
  IpcFrame frame_{};
  size_t header_have_ = 0;   // bytes of frame_.header received
  size_t payload_have_ = 0;  // bytes of frame_.payload received
  std::string_view error_;
  bool impostor_ = false;
};

}  // namespace bx::simnic
