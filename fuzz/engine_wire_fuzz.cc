// Fuzzes the engine's wire codec (src/engine/wire.h): the 32-bit immediate every engine message
// carries, and the fixed-size control payloads (rendezvous request and reply, remote-write
// notification) as Engine::Dispatch reads them: accepted only at exactly their size.
//
// Input: 4 bytes of immediate in network byte order (as ibv_wc.imm_data holds it), then the
// payload. Properties checked:
//   - every 32-bit immediate decodes to fields inside their widths, and re-encodes to itself
//     (the layout has no bits that two decodings could disagree on);
//   - a payload of a control kind is read only when its length is exactly the struct's, and the
//     struct read back re-serialises to the same bytes.
//
// What it does not reach: the state checks in Engine::Dispatch (unknown rendezvous ids, channel
// state, credit overflow, size limits), which need an engine and a QP; see docs/HARDENING.md.
#include <arpa/inet.h>

#include <cstdlib>
#include <cstring>

#include "engine/wire.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

// Reads a control struct the way the engine does: only at exactly its size.
template <typename T>
bool ReadExact(const uint8_t* payload, size_t length, T* out) {
  if (length != sizeof(T)) return false;
  std::memcpy(out, payload, sizeof(T));
  return true;
}

template <typename T>
void CheckRoundTrip(const uint8_t* payload, size_t length) {
  T value;
  if (!ReadExact(payload, length, &value)) return;
  uint8_t again[sizeof(T)];
  std::memcpy(again, &value, sizeof(T));
  Check(std::memcmp(again, payload, sizeof(T)) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bx::engine;
  if (size < 4) return 0;
  uint32_t wire;
  std::memcpy(&wire, data, 4);
  const uint32_t imm_host = ntohl(wire);
  Imm imm = DecodeImm(imm_host);
  Check(uint32_t(imm.kind) <= 0xf);
  Check(imm.credits <= kMaxCreditsPerImm);
  Check(EncodeImm(imm) == imm_host);

  // The payload lives in its own allocation so that any read past it is an ASan report.
  const size_t length = size - 4;
  auto* payload = new uint8_t[length == 0 ? 1 : length];
  std::memcpy(payload, data + 4, length);
  switch (imm.kind) {
    case Kind::kRendezvousRequest:
      CheckRoundTrip<RendezvousRequest>(payload, length);
      break;
    case Kind::kRendezvousReply:
      CheckRoundTrip<RendezvousReply>(payload, length);
      break;
    case Kind::kRemoteWriteDone:
      CheckRoundTrip<RemoteWriteDone>(payload, length);
      break;
    default:
      break;
  }
  delete[] payload;
  return 0;
}
