// The RPC wire format: a 32-byte header in front of every payload, in the same bemalloc Buffer
// (include/bx/rpc.h: Message). One transport message carries one frame.
//
//   offset  size  field
//        0     4  magic "BXRP" (0x50525842, little-endian)
//        4     1  version (1)
//        5     1  kind (FrameKind)
//        6     2  flags (kFlagIdempotent)
//        8     8  call id (chosen by the client per attempt; echoed in the response)
//       16     4  method id (request: from the server's method table; response: unused)
//       20     4  status code (response: bx::StatusCode; the payload is the message when not OK)
//       24     8  budget in microseconds (request: time the caller still waits; 0: no deadline)
//
// The deadline travels as time remaining rather than as a point in time, so that the two hosts'
// clocks need not agree; the server starts counting when the frame arrives.
//
// Hello (client -> server) asks for the method table; HelloAck carries it as "id name\n" lines.
// Heartbeat / HeartbeatAck keep an idle connection's health known. Thread-compatible functions.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "bx/buffer.h"
#include "bx/rpc.h"
#include "bx/status.h"

namespace bx::rpc {

enum class FrameKind : uint8_t {
  kRequest = 1,
  kResponse = 2,
  kHello = 3,
  kHelloAck = 4,
  kHeartbeat = 5,
  kHeartbeatAck = 6,
};

inline constexpr uint16_t kFlagIdempotent = 1;
inline constexpr uint32_t kFrameMagic = 0x50525842;
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 32;

struct FrameHeader {
  FrameKind kind = FrameKind::kRequest;
  uint16_t flags = 0;
  uint64_t call_id = 0;
  uint32_t method_id = 0;
  uint32_t status = 0;
  uint64_t budget_us = 0;
};

// The same on raw bytes (what the fuzz target drives): `out` holds kFrameHeaderBytes.
void EncodeHeaderBytes(const FrameHeader& header, std::byte* out);
Result<FrameHeader> DecodeHeaderBytes(const std::byte* data, size_t size);

// Writes `header` into the first kFrameHeaderBytes of `frame` (which must be that large).
void EncodeHeader(const FrameHeader& header, Buffer& frame);
// Reads and validates the header: DataLoss with the reason for a short frame, a wrong magic or
// version, or an unknown kind.
Result<FrameHeader> DecodeHeader(const Buffer& frame);

// A frame of `kind` with `payload` copied after the header.
Result<Buffer> MakeFrame(const FrameHeader& header, std::string_view payload);

// A Message's whole frame, header and payload, which its public interface keeps out of a user's
// reach (include/bx/rpc.h): a received frame wrapped, or a message's frame lent or given up.
class MessageFrame {
 public:
  static Message Wrap(Buffer frame) { return Message(std::move(frame)); }
  static Buffer& Of(Message& message) { return message.buffer_; }
  static Buffer Take(Message& message) { return std::move(message.buffer_); }
};

// Method table text, as HelloAck carries it.
std::string EncodeMethodTable(const std::unordered_map<std::string, uint32_t>& methods);
Result<std::unordered_map<std::string, uint32_t>> DecodeMethodTable(std::string_view text);

}  // namespace bx::rpc
