#include "transport/tcp/frame.h"

#include <fmt/core.h>

namespace bx::tcp {
namespace {

uint64_t LoadLittleEndian(const std::byte* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(p[i]);
  return value;
}

void StoreLittleEndian(std::byte* p, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(value >> (8 * i));
}

}  // namespace

FrameHeader EncodeFrameHeader(uint64_t payload_length) {
  FrameHeader header{};
  StoreLittleEndian(&header[0], kFrameMagic, 4);
  header[4] = static_cast<std::byte>(kFrameVersion);
  StoreLittleEndian(&header[8], payload_length, 8);
  return header;
}

Result<uint64_t> DecodeFrameHeader(const std::byte* header, size_t max_message_bytes) {
  uint64_t magic = LoadLittleEndian(header, 4);
  if (magic != kFrameMagic) {
    return DataLoss(
        fmt::format("malformed frame header: magic {:#010x}, expected {:#010x} "
                    "(the peer is not a bexpress tcp:// endpoint)",
                    magic, kFrameMagic));
  }
  auto version = static_cast<uint8_t>(header[4]);
  if (version != kFrameVersion) {
    return DataLoss(fmt::format("malformed frame header: version {}, this build speaks {}", version,
                                kFrameVersion));
  }
  uint64_t flags_and_reserved = LoadLittleEndian(header + 5, 3);
  if (flags_and_reserved != 0) {
    return DataLoss(fmt::format("malformed frame header: unknown flags/reserved bits {:#08x}",
                                flags_and_reserved));
  }
  uint64_t length = LoadLittleEndian(header + 8, 8);
  if (length > max_message_bytes) {
    return DataLoss(
        fmt::format("frame header announces {} bytes, above the maximum message size "
                    "of {} bytes (TransportOptions::max_message_bytes)",
                    length, max_message_bytes));
  }
  return length;
}

}  // namespace bx::tcp
