// Fuzzes the framing of the simnic's fabric links (src/simnic/ipc_frame.cc) as a peer process
// sends it: the input (after its first byte) is the byte stream, and the first byte seeds the
// sizes of the reads it arrives in (the stream opens with the fabric cookie). Properties beyond "no
// crash, leak or sanitizer report":
//   - every frame delivered is a header CheckIpcHeader accepts followed by exactly its
//     payload_length bytes, and the frames are consecutive slices of the stream;
//   - what the parser holds for a frame never exceeds 1 MiB or four times what has arrived, so a
//     header that announces 2 GiB costs what the peer has sent;
//   - a refusal has a reason, and a refused parser takes nothing more.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "simnic/ipc_frame.h"

namespace {

using bx::simnic::IpcFrame;
using bx::simnic::IpcFrameParser;
using bx::simnic::IpcHeader;

constexpr uint32_t kPeer = 4242;  // the pid the kernel vouched for (make_seeds uses it too)

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint32_t cuts = data[0] * 2654435761u + 1;
  const uint8_t* stream = data + 1;
  const size_t length = size - 1;

  // The cookie is all zeros (BX_SIM_FABRIC_COOKIE unset): make_seeds' streams open with it.
  const bx::simnic::IpcCookie cookie{};
  IpcFrameParser parser(kPeer, cookie);
  std::vector<IpcFrame> frames;
  size_t taken = 0;
  while (taken < length) {
    std::span<uint8_t> into = parser.Next();
    Check(!into.empty());
    cuts = cuts * 1103515245u + 12345u;
    const size_t n = std::min({into.size(), length - taken, size_t{1} + (cuts >> 16) % 97});
    std::memcpy(into.data(), stream + taken, n);
    taken += n;
    if (!parser.Commit(n, &frames)) {
      Check(!parser.error().empty());
      Check(parser.Next().empty());
      Check(!parser.Commit(0, &frames));
      break;
    }
    Check(parser.held_bytes() <= std::max<size_t>(size_t{1} << 20, 4 * taken));
  }

  size_t at = bx::simnic::kIpcCookieBytes;
  if (!frames.empty()) Check(std::memcmp(stream, cookie.data(), cookie.size()) == 0);
  for (const IpcFrame& frame : frames) {
    Check(at + sizeof(IpcHeader) <= taken);
    Check(std::memcmp(&frame.header, stream + at, sizeof(IpcHeader)) == 0);
    Check(bx::simnic::CheckIpcHeader(frame.header, kPeer).empty());
    at += sizeof(IpcHeader);
    Check(frame.payload.size() == frame.header.payload_length);
    Check(at + frame.payload.size() <= taken);
    Check(frame.payload.empty() ||
          std::memcmp(frame.payload.data(), stream + at, frame.payload.size()) == 0);
    at += frame.payload.size();
  }
  return 0;
}
