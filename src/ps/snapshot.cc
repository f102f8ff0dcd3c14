// ShardState::Save and ShardState::Load: the snapshot file (layout in docs/PS.md).
//
//   header (32 bytes): "BXPSSNAP", u32 version 4, u32 flags 0, u64 body bytes,
//                      u64 checksum of the body (BodyChecksum)
//   body: u64 epoch, u64 applied lsn, u32 table count, u32 0, (version 4) u64 push clock ms,
//         per table: the config (version 3: with max rows, max bytes and rows evicted; version
//         4: ttl seconds, admit after pushes, rows expired), u64 row count, rows (u64 key, a
//         ttl table's u64 push stamp, stride floats; a bounded table's least recently pushed
//         first, so that loading them in order rebuilds its recency), (version 4, a table with
//         admission) u32 width, u32 0, u64 since halving, u64 admitted, u64 rejected,
//         4 x width u16 counters,
//         u64 min generation, u64 client count, per client in eviction order: u64 id, u64 key,
//         u64 contiguous, u64 flags (1: pushed more than once), u64 n, n x u64 sequence
//   Version 1 files (no min generation, key or flags; clients by id) still load: their
//   clients get key 0, so each starts a new session at its next push. Version 1 and 2 files
//   (no bounds) load as unbounded tables; 1 to 3 as tables without ttl or admission.
//
// The body is streamed to the file with the checksum computed on the way; the header is
// written last (the file is a temporary until the rename), so a crash mid-save never leaves a
// file that looks complete.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "base/wire_encoding.h"
#include "ps/shard_state.h"

namespace bx::ps {
namespace {

constexpr char kSnapshotMagic[8] = {'B', 'X', 'P', 'S', 'S', 'N', 'A', 'P'};
constexpr uint32_t kSnapshotVersion = ShardState::kSnapshotVersions.newest;
constexpr size_t kSnapshotHeader = 32;

// The body's checksum: detects corruption and truncation (the body size is in the header
// too); it is not a defence against someone forging a file. Version 1: FNV-1a-64, byte by byte.
// Version 2: a multiply-rotate hash over little-endian 64-bit words (a last partial word
// zero-padded), then the length: a multiply per 8 bytes, not per byte, since every snapshot
// and every install of a GB-sized shard paid seconds for it.
class BodyChecksum {
 public:
  explicit BodyChecksum(uint32_t version) : words_(version >= 2) {}
  void Add(const std::byte* p, size_t n) {
    length_ += n;
    if (!words_) {
      for (size_t i = 0; i < n; ++i) h_ = (h_ ^ static_cast<uint8_t>(p[i])) * 0x100000001b3ull;
      return;
    }
    while (n > 0 && partial_n_ > 0 && partial_n_ < 8) {  // complete a word begun earlier
      partial_[partial_n_++] = *p++;
      --n;
      if (partial_n_ == 8) {
        MixWord(partial_);
        partial_n_ = 0;
      }
    }
    for (; n >= 8; p += 8, n -= 8) MixWord(p);
    for (; n > 0; --n) partial_[partial_n_++] = *p++;
  }
  uint64_t Finish() const {
    if (!words_) return h_;
    BodyChecksum last = *this;
    if (last.partial_n_ > 0) {
      std::fill(last.partial_ + last.partial_n_, last.partial_ + 8, std::byte{0});
      last.MixWord(last.partial_);
    }
    last.Mix(length_);
    return last.h_;
  }

 private:
  void MixWord(const std::byte* p) {
    uint64_t w;
    std::memcpy(&w, p, sizeof w);  // little-endian hosts, as the format
    Mix(w);
  }
  void Mix(uint64_t w) { h_ = (std::rotl(h_, 31) ^ w) * 0x9e3779b97f4a7c15ull; }

  bool words_;
  uint64_t h_ = 0xcbf29ce484222325ull;
  std::byte partial_[8] = {};
  size_t partial_n_ = 0;
  uint64_t length_ = 0;
};

// Buffered writer of the body, to a file or to memory, that checksums what it writes out. The
// body is encoded into out(), which appends to a buffer that Flush hands on.
class SnapshotWriter {
 public:
  explicit SnapshotWriter(FILE* f) : f_(f) {}
  SnapshotWriter(std::vector<std::byte>* memory, uint32_t version)
      : memory_(memory), version_(version), sum_(version) {}
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  WireWriter& out() { return out_; }
  uint32_t version() const { return version_; }
  // Flushes once 1 MiB is buffered: called between rows, so a snapshot never sits in memory
  // whole on its way to a file.
  void MaybeFlush() {
    if (buffer_.size() >= (1u << 20)) Flush();
  }
  void Flush() {
    const auto* b = reinterpret_cast<const std::byte*>(buffer_.data());
    sum_.Add(b, buffer_.size());
    bytes_ += buffer_.size();
    if (memory_ != nullptr) {
      memory_->insert(memory_->end(), b, b + buffer_.size());
    } else if (!buffer_.empty() &&
               std::fwrite(buffer_.data(), 1, buffer_.size(), f_) != buffer_.size()) {
      failed_ = true;
    }
    buffer_.clear();
  }
  bool failed() const { return failed_; }
  // What has been flushed: the body's size and checksum once the last Flush is done.
  uint64_t bytes() const { return bytes_; }
  uint64_t checksum() const { return sum_.Finish(); }

 private:
  FILE* f_ = nullptr;
  std::vector<std::byte>* memory_ = nullptr;
  std::string buffer_;
  WireWriter out_{&buffer_};
  uint32_t version_ = kSnapshotVersion;
  BodyChecksum sum_{kSnapshotVersion};
  uint64_t bytes_ = 0;
  bool failed_ = false;
};

// What `version` holds of the config: CheckEncodable refused configs it cannot carry.
void PutTableConfig(WireWriter& w, uint32_t version, const TableConfig& c, uint64_t evicted,
                    uint64_t expired) {
  w.PutU32(c.id);
  w.PutU8(static_cast<uint8_t>(c.kind));
  w.PutU8(static_cast<uint8_t>(c.init.kind));
  w.PutU8(static_cast<uint8_t>(c.optimizer.kind));
  w.PutU8(0);
  w.PutU32(c.dim);
  w.PutU32(static_cast<uint32_t>(c.name.size()));
  w.PutU64(c.dense_rows);
  for (float f : {c.init.value, c.init.low, c.init.high, c.init.mean, c.init.stddev}) w.PutF32(f);
  w.PutU64(c.init.seed);
  for (float f :
       {c.optimizer.learning_rate, c.optimizer.initial_accumulator, c.optimizer.epsilon}) {
    w.PutF32(f);
  }
  if (version >= 3) {
    w.PutU64(c.max_rows);
    w.PutU64(c.max_bytes);
    w.PutU64(evicted);
  }
  if (version >= 4) {
    w.PutU64(c.ttl_seconds);
    w.PutU64(c.admit_after_pushes);
    w.PutU64(expired);
  }
  w.PutBytes(c.name.data(), c.name.size());
}

Status GetTableConfig(WireReader& r, uint32_t version, TableConfig* c, uint64_t* evicted,
                      uint64_t* expired) {
  uint64_t admit = 0;
  uint8_t kind, init_kind, optimizer_kind, reserved;
  uint32_t name_size;
  if (!r.GetU32(&c->id) || !r.GetU8(&kind) || !r.GetU8(&init_kind) || !r.GetU8(&optimizer_kind) ||
      !r.GetU8(&reserved) || !r.GetU32(&c->dim) || !r.GetU32(&name_size) ||
      !r.GetU64(&c->dense_rows) || !r.GetF32(&c->init.value) || !r.GetF32(&c->init.low) ||
      !r.GetF32(&c->init.high) || !r.GetF32(&c->init.mean) || !r.GetF32(&c->init.stddev) ||
      !r.GetU64(&c->init.seed) || !r.GetF32(&c->optimizer.learning_rate) ||
      !r.GetF32(&c->optimizer.initial_accumulator) || !r.GetF32(&c->optimizer.epsilon) ||
      (version >= 3 &&
       (!r.GetU64(&c->max_rows) || !r.GetU64(&c->max_bytes) || !r.GetU64(evicted))) ||
      (version >= 4 && (!r.GetU64(&c->ttl_seconds) || !r.GetU64(&admit) || !r.GetU64(expired)))) {
    return DataLoss("snapshot: truncated table config");
  }
  if (admit > kMaxAdmitAfterPushes) return DataLoss("snapshot: admit_after_pushes out of range");
  c->admit_after_pushes = static_cast<uint32_t>(admit);
  if (name_size > r.remaining()) return DataLoss("snapshot: table name runs past the end");
  c->name.resize(name_size);
  r.GetBytes(c->name.data(), name_size);
  c->kind = static_cast<TableKind>(kind);
  c->init.kind = static_cast<InitializerKind>(init_kind);
  c->optimizer.kind = static_cast<OptimizerKind>(optimizer_kind);
  // Enum values are checked by Table::ValidateConfig when the table is created.
  return Status::Ok();
}

Status SaveBody(const ShardState& state, SnapshotWriter& snapshot) {
  WireWriter& w = snapshot.out();
  w.PutU64(state.epoch);
  w.PutU64(state.applied_lsn);
  std::vector<uint32_t> ids = state.table_ids();
  w.PutU32(static_cast<uint32_t>(ids.size()));
  w.PutU32(0);
  if (snapshot.version() >= 4) w.PutU64(state.clock_ms);
  for (uint32_t id : ids) {
    const Table& t = *state.table(id);
    PutTableConfig(w, snapshot.version(), t.config(), t.evicted(), t.expired());
    const uint64_t rows = t.row_count();
    w.PutU64(rows);
    uint64_t written = 0;
    const bool stamped = t.ttl_ms() != 0;
    t.ForEachRowPushedAt([&](uint64_t key, uint64_t pushed_ms, std::span<const float> row) {
      if (written++ >= rows) return;
      w.PutU64(key);
      if (stamped) w.PutU64(pushed_ms);
      w.PutF32s(row);
      snapshot.MaybeFlush();
    });
    if (written != rows) {
      return FailedPrecondition("snapshot: table " + std::to_string(id) +
                                " changed while saving (pushes must be stopped)");
    }
    if (const PushAdmission* counts = state.admission(id); counts != nullptr) {
      w.PutU32(counts->width());
      w.PutU32(0);
      w.PutU64(counts->since_halving());
      w.PutU64(counts->admitted());
      w.PutU64(counts->rejected());
      w.PutBytes(counts->counters().data(), counts->counters().size_bytes());
      snapshot.MaybeFlush();
    }
  }
  const PushDedup::Record record = state.dedup().Export();
  w.PutU64(record.min_generation);
  w.PutU64(record.clients.size());
  for (const PushDedup::ClientState& c : record.clients) {
    w.PutU64(c.client_id);
    w.PutU64(c.key);
    w.PutU64(c.contiguous);
    w.PutU64(c.repeat ? 1 : 0);
    w.PutU64(c.recent.size());
    w.PutU64s(c.recent);
    snapshot.MaybeFlush();
  }
  return Status::Ok();
}

Status LoadBody(WireReader& r, uint32_t version, ShardState* state) {
  uint32_t table_count, reserved;
  if (!r.GetU64(&state->epoch) || !r.GetU64(&state->applied_lsn) || !r.GetU32(&table_count) ||
      !r.GetU32(&reserved) || (version >= 4 && !r.GetU64(&state->clock_ms))) {
    return DataLoss("snapshot: truncated body");
  }
  for (uint32_t i = 0; i < table_count; ++i) {
    TableConfig config;
    uint64_t evicted = 0, expired = 0;
    BX_RETURN_IF_ERROR(GetTableConfig(r, version, &config, &evicted, &expired));
    Status created = state->CreateTable(config);
    if (!created.ok()) return DataLoss("snapshot: " + created.message());
    Table* table = state->table(config.id);
    uint64_t rows;
    if (!r.GetU64(&rows)) return DataLoss("snapshot: truncated row count");
    const bool stamped = table->ttl_ms() != 0;
    const uint64_t row_bytes =
        sizeof(uint64_t) * (stamped ? 2 : 1) + uint64_t{table->stride()} * sizeof(float);
    if (rows > r.remaining() / row_bytes) return DataLoss("snapshot: rows run past the end");
    std::vector<float> row(table->stride());
    uint64_t last_pushed = 0;
    for (uint64_t k = 0; k < rows; ++k) {
      uint64_t key = 0, pushed_ms = 0;  // the bounds were checked above: these reads cannot fail
      r.GetU64(&key);
      if (stamped) r.GetU64(&pushed_ms);
      r.GetF32s(row);
      // Expiry walks the list from its oldest end: stamps must not decrease along it.
      if (pushed_ms < last_pushed) return DataLoss("snapshot: row stamps out of order");
      last_pushed = pushed_ms;
      Status inserted = table->InsertRow(key, row, pushed_ms);
      if (!inserted.ok()) return DataLoss("snapshot: " + inserted.message());
    }
    if (table->evicted() != 0) {
      return DataLoss("snapshot: table " + std::to_string(config.id) + " holds more rows than " +
                      "its bound");
    }
    table->set_evicted(evicted);
    table->set_expired(expired);
    if (PushAdmission* counts = state->admission(config.id); counts != nullptr) {
      uint32_t width, zero;
      uint64_t since_halving, admitted, rejected;
      if (!r.GetU32(&width) || !r.GetU32(&zero) || !r.GetU64(&since_halving) ||
          !r.GetU64(&admitted) || !r.GetU64(&rejected)) {
        return DataLoss("snapshot: truncated admission counts");
      }
      if (width != counts->width()) {
        return DataLoss("snapshot: admission sketch of width " + std::to_string(width) +
                        ", expected " + std::to_string(counts->width()));
      }
      std::vector<uint16_t> counters(counts->counters().size());
      if (!r.GetBytes(counters.data(), counters.size() * sizeof(uint16_t))) {
        return DataLoss("snapshot: truncated admission counters");
      }
      BX_RETURN_IF_ERROR(counts->Restore(counters, since_halving, admitted, rejected));
    }
  }
  PushDedup::Record record;
  uint64_t client_count;
  if ((version >= 2 && !r.GetU64(&record.min_generation)) || !r.GetU64(&client_count)) {
    return DataLoss("snapshot: truncated dedup state");
  }
  const size_t client_bytes = version >= 2 ? 40 : 24;
  if (client_count > r.remaining() / client_bytes) {
    return DataLoss("snapshot: clients run past the end");
  }
  record.clients.resize(client_count);
  for (PushDedup::ClientState& c : record.clients) {
    uint64_t n, flags = 1;
    if (!r.GetU64(&c.client_id) || (version >= 2 && !r.GetU64(&c.key)) ||
        !r.GetU64(&c.contiguous) || (version >= 2 && !r.GetU64(&flags)) || !r.GetU64(&n)) {
      return DataLoss("snapshot: truncated client");
    }
    if (flags > 1) return DataLoss("snapshot: unknown client flags");
    c.repeat = flags == 1;
    if (n > r.remaining() / sizeof(uint64_t)) return DataLoss("snapshot: client runs past end");
    c.recent.resize(n);
    r.GetU64s(c.recent);
  }
  if (r.remaining() != 0) return DataLoss("snapshot: trailing bytes");
  return state->dedup().Import(record);
}

void WriteHeader(const SnapshotWriter& w, std::span<std::byte, kSnapshotHeader> out) {
  WireWriter h(out);
  h.PutBytes(kSnapshotMagic, sizeof kSnapshotMagic);
  h.PutU32(w.version());
  h.PutU32(0);
  h.PutU64(w.bytes());
  h.PutU64(w.checksum());
}

// Checks header, version and checksum of a whole snapshot and loads its body; `what` names it
// in errors.
Result<std::unique_ptr<ShardState>> Parse(std::span<const std::byte> bytes,
                                          PushDedup::Options dedup_options,
                                          const std::string& what) {
  WireReader r(bytes);
  char magic[8];
  uint32_t version, flags;
  uint64_t body_size, checksum;
  if (!r.GetBytes(magic, sizeof magic) || !r.GetU32(&version) || !r.GetU32(&flags) ||
      !r.GetU64(&body_size) || !r.GetU64(&checksum)) {
    return DataLoss(what + ": shorter than its header");
  }
  if (std::memcmp(magic, kSnapshotMagic, sizeof magic) != 0) {
    return DataLoss(what + ": not a bexpress shard snapshot");
  }
  if (version < 1 || version > kSnapshotVersion || flags != 0) {
    return DataLoss(what + ": unsupported version " + std::to_string(version));
  }
  if (body_size != r.remaining()) {
    return DataLoss(what + ": body is " + std::to_string(r.remaining()) + " bytes, header says " +
                    std::to_string(body_size));
  }
  BodyChecksum sum(version);
  sum.Add(bytes.data() + kSnapshotHeader, body_size);
  if (sum.Finish() != checksum) return DataLoss(what + ": checksum mismatch");
  auto state = std::make_unique<ShardState>(dedup_options);
  Status loaded = LoadBody(r, version, state.get());
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

Status ShardState::CheckEncodable(uint32_t version) const {
  if (version < kOldestWrittenSnapshot || version > kSnapshotVersions.newest) {
    return FailedPrecondition("snapshot version " + std::to_string(version) +
                              " is not written by this build (it writes " +
                              std::to_string(kOldestWrittenSnapshot) + ".." +
                              std::to_string(kSnapshotVersions.newest) + ")");
  }
  for (uint32_t id : table_ids()) {
    const TableConfig& c = table(id)->config();
    if (version < 3 && (c.max_rows != 0 || c.max_bytes != 0)) {
      return FailedPrecondition("table " + c.name + " is bounded (max_rows, max_bytes), which " +
                                "snapshot version " + std::to_string(version) + " cannot carry");
    }
    if (version < 4 && (c.ttl_seconds != 0 || c.admit_after_pushes > 1)) {
      return FailedPrecondition("table " + c.name + " has a ttl or admission (ttl_seconds, " +
                                "admit_after_pushes), which snapshot version " +
                                std::to_string(version) + " cannot carry");
    }
  }
  return Status::Ok();
}

Result<std::vector<std::byte>> ShardState::Encode(uint32_t version) const {
  BX_RETURN_IF_ERROR(CheckEncodable(version));
  std::vector<std::byte> out(kSnapshotHeader);
  // The rows' bytes, known up front: growing by doubling copied a GB-sized snapshot twice more.
  size_t rows_bytes = 0;
  for (uint32_t id : table_ids()) {
    const Table& t = *table(id);
    rows_bytes += t.RowBytes(t.row_count()) + (t.ttl_ms() != 0 ? 8 * t.row_count() : 0);
  }
  out.reserve(kSnapshotHeader + rows_bytes + (size_t{1} << 20));
  SnapshotWriter w(&out, version);
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
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return NotFound("snapshot " + path + ": cannot open");
  std::vector<char> file(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  if (!in.read(file.data(), static_cast<std::streamsize>(file.size()))) {
    return DataLoss("snapshot " + path + ": cannot read");
  }
  return Parse(std::as_bytes(std::span<const char>(file)), dedup_options, "snapshot " + path);
}

}  // namespace bx::ps
