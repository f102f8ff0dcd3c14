// The byte-level half of the RPC frame format: no Buffer, no allocator, so the fuzz target
// (fuzz/rpc_frame_fuzz.cc) compiles exactly this file.
#include <bit>
#include <charconv>
#include <cstring>

#include "rpc/frame.h"

namespace bx::rpc {

static_assert(std::endian::native == std::endian::little,
              "the frame header is written in host order, which must be little-endian");

namespace {

template <typename T>
void Put(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof(T));
}
template <typename T>
T Get(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

}  // namespace

void EncodeHeaderBytes(const FrameHeader& header, std::byte* p) {
  Put<uint32_t>(p, kFrameMagic);
  Put<uint8_t>(p + 4, kFrameVersion);
  Put<uint8_t>(p + 5, static_cast<uint8_t>(header.kind));
  Put<uint16_t>(p + 6, header.flags);
  Put<uint64_t>(p + 8, header.call_id);
  Put<uint32_t>(p + 16, header.method_id);
  Put<uint32_t>(p + 20, header.status);
  Put<uint64_t>(p + 24, header.budget_us);
}

Result<FrameHeader> DecodeHeaderBytes(const std::byte* p, size_t size) {
  if (size < kFrameHeaderBytes) {
    return DataLoss("rpc frame of " + std::to_string(size) + " bytes is shorter than its header");
  }
  if (Get<uint32_t>(p) != kFrameMagic) return DataLoss("rpc frame: bad magic");
  if (Get<uint8_t>(p + 4) != kFrameVersion) {
    return DataLoss("rpc frame: version " + std::to_string(Get<uint8_t>(p + 4)) + ", expected " +
                    std::to_string(kFrameVersion));
  }
  FrameHeader header;
  uint8_t kind = Get<uint8_t>(p + 5);
  if (kind < 1 || kind > static_cast<uint8_t>(FrameKind::kHeartbeatAck)) {
    return DataLoss("rpc frame: unknown kind " + std::to_string(kind));
  }
  header.kind = static_cast<FrameKind>(kind);
  header.flags = Get<uint16_t>(p + 6);
  header.call_id = Get<uint64_t>(p + 8);
  header.method_id = Get<uint32_t>(p + 16);
  header.status = Get<uint32_t>(p + 20);
  header.budget_us = Get<uint64_t>(p + 24);
  return header;
}

std::string EncodeMethodTable(const std::unordered_map<std::string, uint32_t>& methods) {
  std::string text;
  for (const auto& [name, id] : methods) text += std::to_string(id) + " " + name + "\n";
  return text;
}

Result<std::unordered_map<std::string, uint32_t>> DecodeMethodTable(std::string_view text) {
  std::unordered_map<std::string, uint32_t> methods;
  while (!text.empty()) {
    size_t end = text.find('\n');
    if (end == std::string_view::npos) return DataLoss("rpc method table: unterminated line");
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end + 1);
    size_t space = line.find(' ');
    uint32_t id = 0;
    if (space == std::string_view::npos ||
        std::from_chars(line.data(), line.data() + space, id).ec != std::errc() ||
        space + 1 >= line.size()) {
      return DataLoss("rpc method table: malformed line '" + std::string(line) + "'");
    }
    methods.emplace(std::string(line.substr(space + 1)), id);
  }
  return methods;
}

}  // namespace bx::rpc
