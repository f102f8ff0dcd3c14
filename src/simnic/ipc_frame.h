// The framing of the simnic's fabric links (ipc_link.cc): each frame is an IpcHeader, then
// header.payload_length bytes. IpcFrameParser reads one peer's stream as a pure state machine,
// so that it can be fuzzed (fuzz/simnic_frame_fuzz.cc) and so that the reader thread never
// waits on one peer: it receives straight into Next() whatever the socket has, and Commit()
// completes frames.
//
// A header is checked before anything is allocated for it (CheckIpcHeader), and a payload grows
// as its bytes arrive (up to 1 MiB at once, then fourfold), so a header costs the reader what the
// peer has sent, not what it announced.
#pragma once

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
};

inline constexpr uint32_t kIpcMagic = 0xb5e1c0de;
inline constexpr uint8_t kIpcRequest = 1;
inline constexpr uint8_t kIpcReply = 2;
// No frame carries more than the largest RC message (2 GiB, sim_objects.h's kMaxMsgSize).
inline constexpr uint32_t kIpcMaxPayload = 1u << 31;

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
  explicit IpcFrameParser(uint32_t peer_pid) : peer_pid_(peer_pid) {}

  // Where the peer's next bytes go: the rest of a header, or of a payload (at most the part the
  // payload has grown to). Empty once the stream is refused.
  std::span<uint8_t> Next();
  // `n` bytes (at most Next().size()) were written at Next(). Appends each frame completed to
  // *frames. False once the stream is refused (error() says why); it stays refused.
  bool Commit(size_t n, std::vector<IpcFrame>* frames);

  std::string_view error() const { return error_; }
  uint32_t peer_pid() const { return peer_pid_; }
  // The stream was refused for a header that named another process as its sender: a forgery,
  // which must not be taken for the peer going away.
  bool forged() const { return forged_; }
  // Bytes held for the frame being read (its payload's capacity): what the peer costs now.
  size_t held_bytes() const { return frame_.payload.capacity(); }

 private:
  const uint32_t peer_pid_;
  IpcFrame frame_{};
  size_t header_have_ = 0;   // bytes of frame_.header received
  size_t payload_have_ = 0;  // bytes of frame_.payload received
  std::string_view error_;
  bool forged_ = false;
};

}  // namespace bx::simnic
