// Fuzzes the tcp:// frame header decoder (src/transport/tcp/frame.cc), which every received
// frame meets before anything is allocated for its payload.
//
// Input: 16 header bytes, optionally followed by 8 bytes that set the receiver's
// max_message_bytes (little-endian; without them the transport's default, 1 GiB).
// Properties checked beyond "no crash, leak or sanitizer report":
//   - an accepted header never announces more than max_message_bytes;
//   - an accepted header is exactly what EncodeFrameHeader writes for that length (so no field
//     the decoder ignores can carry anything);
//   - a refusal says why.
#include <cstdlib>
#include <cstring>

#include "transport/tcp/frame.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using bx::tcp::kFrameHeaderBytes;
  if (size < kFrameHeaderBytes) return 0;
  uint64_t max_message_bytes = 1ull << 30;
  if (size >= kFrameHeaderBytes + 8) {
    max_message_bytes = 0;
    for (int i = 7; i >= 0; --i) max_message_bytes = (max_message_bytes << 8) | data[16 + i];
  }
  // A copy of exactly the header, so reading past it is an ASan report, not a silent read of
  // the bytes that follow in the input.
  auto* header = new std::byte[kFrameHeaderBytes];
  std::memcpy(header, data, kFrameHeaderBytes);
  auto length = bx::tcp::DecodeFrameHeader(header, size_t(max_message_bytes));
  if (length.ok()) {
    Check(*length <= max_message_bytes);
    auto encoded = bx::tcp::EncodeFrameHeader(*length);
    Check(std::memcmp(encoded.data(), header, kFrameHeaderBytes) == 0);
  } else {
    Check(!length.status().message().empty());
  }
  delete[] header;
  return 0;
}
