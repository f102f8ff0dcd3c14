#include "transport/tcp/frame.h"

#include <fmt/core.h>

#include "base/wire_encoding.h"

namespace bx::tcp {

FrameHeader EncodeFrameHeader(uint64_t payload_length) {
  FrameHeader header{};
  WireWriter w{std::span<std::byte>(header)};
  w.PutU32(kFrameMagic);
  w.PutU8(kFrameVersion);
  w.PutU8(0);   // flags
  w.PutU16(0);  // reserved
  w.PutU64(payload_length);
  return header;
}

Result<uint64_t> DecodeFrameHeader(const std::byte* header, size_t max_message_bytes) {
  // kFrameHeaderBytes are there: none of these reads can fail.
  WireReader r(std::span<const std::byte>(header, kFrameHeaderBytes));
  uint32_t magic = 0;
  uint8_t version = 0, flags = 0;
  uint16_t reserved = 0;
  uint64_t length = 0;
  r.GetU32(&magic);
  r.GetU8(&version);
  r.GetU8(&flags);
  r.GetU16(&reserved);
  r.GetU64(&length);
  if (magic != kFrameMagic) {
    return DataLoss(
        fmt::format("malformed frame header: magic {:#010x}, expected {:#010x} "
                    "(the peer is not a bexpress tcp:// endpoint)",
                    magic, kFrameMagic));
  }
  if (version != kFrameVersion) {
    return DataLoss(fmt::format("malformed frame header: version {}, this build speaks {}", version,
                                kFrameVersion));
  }
  if (flags != 0 || reserved != 0) {
    return DataLoss(fmt::format(
        "malformed frame header: unknown flags/reserved bits (flags {:#04x}, reserved {:#06x})",
        flags, reserved));
  }
  if (length > max_message_bytes) {
    return DataLoss(
        fmt::format("frame header announces {} bytes, above the maximum message size "
                    "of {} bytes (TransportOptions::max_message_bytes)",
                    length, max_message_bytes));
  }
  return length;
}

}  // namespace bx::tcp
