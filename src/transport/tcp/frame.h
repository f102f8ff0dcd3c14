// The wire format of tcp:// : each message is one frame, a fixed 16-byte header followed by the
// payload. All fields are little-endian.
//
//   offset  size  field
//   0       4     magic    0x31545842, the bytes "BXT1": rejects a peer that is not bexpress
//   4       1     version  1
//   5       1     flags    0; any other value is malformed, so a future flag is never ignored
//   6       2     reserved 0
//   8       8     length   payload bytes (0 allowed), at most TransportOptions::max_message_bytes
//
// The header is checked in full before anything is allocated for the payload, so a peer cannot
// make the receiver allocate more than max_message_bytes by claiming a large length.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "bx/status.h"

namespace bx::tcp {

inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr uint32_t kFrameMagic = 0x31545842;  // "BXT1" read as a little-endian u32
inline constexpr uint8_t kFrameVersion = 1;

using FrameHeader = std::array<std::byte, kFrameHeaderBytes>;

FrameHeader EncodeFrameHeader(uint64_t payload_length);

// The payload length announced by `header` (kFrameHeaderBytes bytes), or DataLoss saying what is
// wrong with it: bad magic, unknown version, flags or reserved bits, or a length beyond
// `max_message_bytes`.
Result<uint64_t> DecodeFrameHeader(const std::byte* header, size_t max_message_bytes);

}  // namespace bx::tcp
