// ShardState::Save and ShardState::Load: the snapshot file (layout in docs/PS.md).
//
//   header (32 bytes): "BXPSSNAP", u32 version 1, u32 flags 0, u64 body bytes,
//                      u64 FNV-1a-64 of the body
//   body: u64 epoch, u64 applied lsn, u32 table count, u32 0,
//         per table: the config, u64 row count, rows (u64 key, stride floats),
//         u64 client count, per client: u64 id, u64 contiguous, u64 n, n x u64 sequence
//
// The body is streamed to the file with the checksum computed on the way; the header is
// written last (the file is a temporary until the rename), so a crash mid-save never leaves a
// file that looks complete.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "ps/byte_io.h"
#include "ps/shard_state.h"

namespace bx::ps {
namespace {

constexpr char kSnapshotMagic[8] = {'B', 'X', 'P', 'S', 'S', 'N', 'A', 'P'};
constexpr uint32_t kSnapshotVersion = 1;
constexpr size_t kSnapshotHeader = 32;

// FNV-1a, 64-bit: detects corruption and truncation (the body size is in the header too); it
// is not a defence against someone forging a file.
struct Fnv1a64 {
  uint64_t h = 0xcbf29ce484222325ull;
  void Add(const std::byte* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<uint8_t>(p[i]);
      h *= 0x100000001b3ull;
    }
  }
};

// Buffered writer, to a file or to memory, that checksums everything after the header.
class SnapshotWriter {
 public:
  explicit SnapshotWriter(FILE* f) : f_(f) {}
  explicit SnapshotWriter(std::vector<std::byte>* memory) : memory_(memory) {}
  template <typename T>
  void Put(T v) {
    PutBytes(&v, sizeof v);
  }
  void PutBytes(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    sum_.Add(b, n);
    bytes_ += n;
    buffer_.insert(buffer_.end(), b, b + n);
    if (buffer_.size() >= (1u << 20)) Flush();
  }
  void Flush() {
    if (memory_ != nullptr) {
      memory_->insert(memory_->end(), buffer_.begin(), buffer_.end());
    } else if (!buffer_.empty() &&
               std::fwrite(buffer_.data(), 1, buffer_.size(), f_) != buffer_.size()) {
      failed_ = true;
    }
    buffer_.clear();
  }
  bool failed() const { return failed_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t checksum() const { return sum_.h; }

 private:
  FILE* f_ = nullptr;
  std::vector<std::byte>* memory_ = nullptr;
  std::vector<std::byte> buffer_;
  Fnv1a64 sum_;
  uint64_t bytes_ = 0;
  bool failed_ = false;
};

void PutTableConfig(SnapshotWriter& w, const TableConfig& c) {
  w.Put<uint32_t>(c.id);
  w.Put<uint8_t>(static_cast<uint8_t>(c.kind));
  w.Put<uint8_t>(static_cast<uint8_t>(c.init.kind));
  w.Put<uint8_t>(static_cast<uint8_t>(c.optimizer.kind));
  w.Put<uint8_t>(0);
  w.Put<uint32_t>(c.dim);
  w.Put<uint32_t>(static_cast<uint32_t>(c.name.size()));
  w.Put<uint64_t>(c.dense_rows);
  for (float f : {c.init.value, c.init.low, c.init.high, c.init.mean, c.init.stddev}) w.Put(f);
  w.Put<uint64_t>(c.init.seed);
  for (float f :
       {c.optimizer.learning_rate, c.optimizer.initial_accumulator, c.optimizer.epsilon}) {
    w.Put(f);
  }
  w.PutBytes(c.name.data(), c.name.size());
}

Status GetTableConfig(ByteReader& r, TableConfig* c) {
  uint8_t kind, init_kind, optimizer_kind, reserved;
  uint32_t name_size;
  if (!r.Get(&c->id) || !r.Get(&kind) || !r.Get(&init_kind) || !r.Get(&optimizer_kind) ||
      !r.Get(&reserved) || !r.Get(&c->dim) || !r.Get(&name_size) || !r.Get(&c->dense_rows) ||
      !r.Get(&c->init.value) || !r.Get(&c->init.low) || !r.Get(&c->init.high) ||
      !r.Get(&c->init.mean) || !r.Get(&c->init.stddev) || !r.Get(&c->init.seed) ||
      !r.Get(&c->optimizer.learning_rate) || !r.Get(&c->optimizer.initial_accumulator) ||
      !r.Get(&c->optimizer.epsilon)) {
    return DataLoss("snapshot: truncated table config");
  }
  if (name_size > r.remaining()) return DataLoss("snapshot: table name runs past the end");
  c->name.resize(name_size);
  r.GetBytes(c->name.data(), name_size);
  c->kind = static_cast<TableKind>(kind);
  c->init.kind = static_cast<InitializerKind>(init_kind);
  c->optimizer.kind = static_cast<OptimizerKind>(optimizer_kind);
  // Enum values are checked by Table::ValidateConfig when the table is created.
  return Status::Ok();
}

Status SaveBody(const ShardState& state, SnapshotWriter& w) {
  w.Put<uint64_t>(state.epoch);
  w.Put<uint64_t>(state.applied_lsn);
  std::vector<uint32_t> ids = state.table_ids();
  w.Put<uint32_t>(static_cast<uint32_t>(ids.size()));
  w.Put<uint32_t>(0);
  for (uint32_t id : ids) {
    const Table& t = *state.table(id);
    PutTableConfig(w, t.config());
    const uint64_t rows = t.row_count();
    w.Put<uint64_t>(rows);
    uint64_t written = 0;
    t.ForEachRow([&](uint64_t key, std::span<const float> row) {
      if (written++ >= rows) return;
      w.Put<uint64_t>(key);
      w.PutBytes(row.data(), row.size_bytes());
    });
    if (written != rows) {
      return FailedPrecondition("snapshot: table " + std::to_string(id) +
                                " changed while saving (pushes must be stopped)");
    }
  }
  std::vector<PushDedup::ClientState> clients = state.dedup().Export();
  w.Put<uint64_t>(clients.size());
  for (const PushDedup::ClientState& c : clients) {
    w.Put<uint64_t>(c.client_id);
    w.Put<uint64_t>(c.contiguous);
    w.Put<uint64_t>(c.recent.size());
    w.PutBytes(c.recent.data(), c.recent.size() * sizeof(uint64_t));
  }
  return Status::Ok();
}

Status LoadBody(ByteReader& r, ShardState* state) {
  uint32_t table_count, reserved;
  if (!r.Get(&state->epoch) || !r.Get(&state->applied_lsn) || !r.Get(&table_count) ||
      !r.Get(&reserved)) {
    return DataLoss("snapshot: truncated body");
  }
  for (uint32_t i = 0; i < table_count; ++i) {
    TableConfig config;
    BX_RETURN_IF_ERROR(GetTableConfig(r, &config));
    Status created = state->CreateTable(config);
    if (!created.ok()) return DataLoss("snapshot: " + created.message());
    Table* table = state->table(config.id);
    uint64_t rows;
    if (!r.Get(&rows)) return DataLoss("snapshot: truncated row count");
    const uint64_t row_bytes = sizeof(uint64_t) + uint64_t{table->stride()} * sizeof(float);
    if (rows > r.remaining() / row_bytes) return DataLoss("snapshot: rows run past the end");
    std::vector<float> row(table->stride());
    for (uint64_t k = 0; k < rows; ++k) {
      uint64_t key = 0;  // the bounds were checked above: these reads cannot fail
      r.Get(&key);
      r.GetBytes(row.data(), row.size() * sizeof(float));
      Status inserted = table->InsertRow(key, row);
      if (!inserted.ok()) return DataLoss("snapshot: " + inserted.message());
    }
  }
  uint64_t client_count;
  if (!r.Get(&client_count)) return DataLoss("snapshot: truncated dedup state");
  if (client_count > r.remaining() / 24) return DataLoss("snapshot: clients run past the end");
  std::vector<PushDedup::ClientState> clients(client_count);
  for (PushDedup::ClientState& c : clients) {
    uint64_t n;
    if (!r.Get(&c.client_id) || !r.Get(&c.contiguous) || !r.Get(&n)) {
      return DataLoss("snapshot: truncated client");
    }
    if (n > r.remaining() / sizeof(uint64_t)) return DataLoss("snapshot: client runs past end");
    c.recent.resize(n);
    r.GetBytes(c.recent.data(), n * sizeof(uint64_t));
  }
  if (r.remaining() != 0) return DataLoss("snapshot: trailing bytes");
  return state->dedup().Import(clients);
}

void WriteHeader(const SnapshotWriter& w, std::span<std::byte, kSnapshotHeader> out) {
  ByteWriter h(out);
  h.PutBytes(kSnapshotMagic, sizeof kSnapshotMagic);
  h.Put<uint32_t>(kSnapshotVersion);
  h.Put<uint32_t>(0);
  h.Put<uint64_t>(w.bytes());
  h.Put<uint64_t>(w.checksum());
}

// Checks header, version and checksum of a whole snapshot and loads its body; `what` names it
// in errors.
Result<std::unique_ptr<ShardState>> Parse(std::span<const std::byte> bytes,
                                          PushDedup::Options dedup_options,
                                          const std::string& what) {
  ByteReader r(bytes);
  char magic[8];
  uint32_t version, flags;
  uint64_t body_size, checksum;
  if (!r.GetBytes(magic, sizeof magic) || !r.Get(&version) || !r.Get(&flags) ||
      !r.Get(&body_size) || !r.Get(&checksum)) {
    return DataLoss(what + ": shorter than its header");
  }
  if (std::memcmp(magic, kSnapshotMagic, sizeof magic) != 0) {
    return DataLoss(what + ": not a bexpress shard snapshot");
  }
  if (version != kSnapshotVersion || flags != 0) {
    return DataLoss(what + ": unsupported version " + std::to_string(version));
  }
  if (body_size != r.remaining()) {
    return DataLoss(what + ": body is " + std::to_string(r.remaining()) + " bytes, header says " +
                    std::to_string(body_size));
  }
  Fnv1a64 sum;
  sum.Add(bytes.data() + kSnapshotHeader, body_size);
  if (sum.h != checksum) return DataLoss(what + ": checksum mismatch");
  auto state = std::make_unique<ShardState>(dedup_options);
  Status loaded = LoadBody(r, state.get());
  if (!loaded.ok()) return loaded.WithContext(what);
  return state;
}

}  // namespace

Status ShardState::Save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::FromErrno(errno, "snapshot: open " + tmp);
  std::byte placeholder[kSnapshotHeader] = {};
  bool ok = std::fwrite(placeholder, 1, sizeof placeholder, f) == sizeof placeholder;
  SnapshotWriter w(f);
  Status body = SaveBody(*this, w);
  w.Flush();
  ok = ok && !w.failed();
  if (ok && body.ok()) {
    std::byte header[kSnapshotHeader];
    WriteHeader(w, header);
    ok = std::fseek(f, 0, SEEK_SET) == 0 &&
         std::fwrite(header, 1, sizeof header, f) == sizeof header;
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  std::fclose(f);
  if (!body.ok() || !ok) {
    std::remove(tmp.c_str());
    return body.ok() ? Status::FromErrno(err, "snapshot: write " + tmp) : body;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::FromErrno(errno, "snapshot: rename to " + path);
  }
  return Status::Ok();
}

Result<std::vector<std::byte>> ShardState::Encode() const {
  std::vector<std::byte> out(kSnapshotHeader);
  SnapshotWriter w(&out);
  BX_RETURN_IF_ERROR(SaveBody(*this, w));
  w.Flush();
  WriteHeader(w, std::span<std::byte, kSnapshotHeader>(out.data(), kSnapshotHeader));
  return out;
}

Result<std::unique_ptr<ShardState>> ShardState::Decode(std::span<const std::byte> bytes,
                                                       PushDedup::Options dedup_options) {
  return Parse(bytes, dedup_options, "snapshot");
}

Result<std::unique_ptr<ShardState>> ShardState::Load(const std::string& path,
                                                     PushDedup::Options dedup_options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("snapshot " + path + ": cannot open");
  std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return Parse(std::as_bytes(std::span<const char>(file)), dedup_options, "snapshot " + path);
}

}  // namespace bx::ps
