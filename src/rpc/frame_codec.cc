// The byte-level half of the RPC frame format: no Buffer, no allocator, so the fuzz target
// (fuzz/rpc_frame_fuzz.cc) compiles exactly this file.
#include <charconv>

#include "base/wire_encoding.h"
#include "rpc/frame.h"

namespace bx::rpc {

void EncodeHeaderBytes(const FrameHeader& header, std::byte* p) {
  WireWriter w(std::span<std::byte>(p, kFrameHeaderBytes));
  w.PutU32(kFrameMagic);
  w.PutU8(kFrameVersion);
  w.PutU8(static_cast<uint8_t>(header.kind));
  w.PutU16(header.flags);
  w.PutU64(header.call_id);
  w.PutU32(header.method_id);
  w.PutU32(header.status);
  w.PutU64(header.budget_us);
}

Result<FrameHeader> DecodeHeaderBytes(const std::byte* p, size_t size) {
  if (size < kFrameHeaderBytes) {
    return DataLoss("rpc frame of " + std::to_string(size) + " bytes is shorter than its header");
  }
  // The whole header is there: none of these reads can fail.
  WireReader r(std::span<const std::byte>(p, kFrameHeaderBytes));
  uint32_t magic = 0;
  uint8_t version = 0, kind = 0;
  r.GetU32(&magic);
  r.GetU8(&version);
  r.GetU8(&kind);
  if (magic != kFrameMagic) return DataLoss("rpc frame: bad magic");
  if (version != kFrameVersion) {
    return DataLoss("rpc frame: version " + std::to_string(version) + ", expected " +
                    std::to_string(kFrameVersion));
  }
  if (kind < 1 || kind > static_cast<uint8_t>(FrameKind::kHeartbeatAck)) {
    return DataLoss("rpc frame: unknown kind " + std::to_string(kind));
  }
  FrameHeader header;
  header.kind = static_cast<FrameKind>(kind);
  r.GetU16(&header.flags);
  r.GetU64(&header.call_id);
  r.GetU32(&header.method_id);
  r.GetU32(&header.status);
  r.GetU64(&header.budget_us);
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
