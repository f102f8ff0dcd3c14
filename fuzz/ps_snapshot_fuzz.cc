// Fuzzes the shard snapshot (src/ps/snapshot.cc): the bytes a primary sends a joining or
// restarted replica (docs/PS.md "Catch-up"), and the file a replica loads at start.
//
// Input: a snapshot body. The harness puts a valid header in front (magic and version from an
// encoded empty state, the body's size and its FNV-1a 64 checksum), so the fuzzer spends its
// time in the body's parser rather than on the checksum. Properties beyond "no crash, leak or
// sanitizer report":
//   - a refusal carries a message;
//   - an accepted state encodes again, and that encoding decodes to the same state: position,
//     tables and every row bit for bit (rows compared by key, since a table's iteration order
//     may depend on its insertion history).
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "ps/shard_state.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

// The header layout of docs/PS.md "Snapshot file": 8-byte magic, u32 version, u32 flags,
// u64 body size, u64 FNV-1a 64 of the body.
constexpr size_t kHeaderBytes = 32;
constexpr size_t kMagicVersionFlags = 16;

uint64_t Fnv1a64(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}

// Table id -> key -> the row's bits.
using Rows = std::map<uint32_t, std::map<uint64_t, std::vector<uint32_t>>>;

Rows RowsOf(const bx::ps::ShardState& state) {
  Rows rows;
  for (uint32_t id : state.table_ids()) {
    auto& table = rows[id];
    state.table(id)->ForEachRow([&](uint64_t key, std::span<const float> row) {
      std::vector<uint32_t> bits(row.size());
      std::memcpy(bits.data(), row.data(), row.size_bytes());
      table[key] = std::move(bits);
    });
  }
  return rows;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::byte> empty = [] {
    bx::ps::ShardState state;
    auto encoded = state.Encode();
    Check(encoded.ok() && encoded->size() >= kHeaderBytes);
    return *encoded;
  }();
  std::vector<std::byte> snapshot(kHeaderBytes + size);
  std::memcpy(snapshot.data(), empty.data(), kMagicVersionFlags);
  const uint64_t body_size = size;
  const uint64_t checksum = Fnv1a64(data, size);
  std::memcpy(snapshot.data() + 16, &body_size, 8);
  std::memcpy(snapshot.data() + 24, &checksum, 8);
  if (size > 0) std::memcpy(snapshot.data() + kHeaderBytes, data, size);

  auto state = bx::ps::ShardState::Decode(snapshot);
  if (!state.ok()) {
    Check(!state.status().message().empty());
    return 0;
  }
  auto encoded = (*state)->Encode();
  Check(encoded.ok());
  auto again = bx::ps::ShardState::Decode(*encoded);
  Check(again.ok());
  Check((*again)->epoch == (*state)->epoch && (*again)->applied_lsn == (*state)->applied_lsn);
  Check(RowsOf(**again) == RowsOf(**state));
  return 0;
}
