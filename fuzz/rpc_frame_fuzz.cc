// Fuzzes the RPC frame header and the method table (src/rpc/frame_codec.cc): every request and
// response a server or client receives meets DecodeHeaderBytes first, and a client parses the
// server's method table from HelloAck.
//
// Input: the first 32 bytes are a frame header; the rest is read as a method table.
// Properties checked beyond "no crash, leak or sanitizer report":
//   - an accepted header re-encodes to exactly the same 32 bytes (no ignored field can carry
//     anything);
//   - a short input is refused, never read past;
//   - an accepted method table re-encodes to a table that decodes to the same map.
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "rpc/frame.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using bx::rpc::kFrameHeaderBytes;
  const size_t header_size = size < kFrameHeaderBytes ? size : kFrameHeaderBytes;
  // A copy of exactly the header bytes, so a read past them is an ASan report.
  auto* header = new std::byte[header_size > 0 ? header_size : 1];
  std::memcpy(header, data, header_size);
  auto decoded = bx::rpc::DecodeHeaderBytes(header, header_size);
  if (decoded.ok()) {
    Check(header_size == kFrameHeaderBytes);
    std::byte again[kFrameHeaderBytes];
    bx::rpc::EncodeHeaderBytes(*decoded, again);
    Check(std::memcmp(again, header, kFrameHeaderBytes) == 0);
  } else {
    Check(!decoded.status().message().empty());
  }
  delete[] header;

  if (size > kFrameHeaderBytes) {
    std::string_view text(reinterpret_cast<const char*>(data) + kFrameHeaderBytes,
                          size - kFrameHeaderBytes);
    auto table = bx::rpc::DecodeMethodTable(text);
    if (table.ok()) {
      auto again = bx::rpc::DecodeMethodTable(bx::rpc::EncodeMethodTable(*table));
      Check(again.ok() && *again == *table);
    }
  }
  return 0;
}
