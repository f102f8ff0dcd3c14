// Wire codecs of the parameter server (ps/wire.h); layouts in docs/PS.md.
#include "ps/wire.h"

#include <limits>
#include <string>

#include "base/wire_encoding.h"
#include "bx/ps/table_config.h"  // kMaxDim

namespace bx::ps {
namespace {

constexpr uint32_t kMagic = 0x53505842;  // "BXPS" little-endian
// Version 2: pushes carry the client key; acks can say the client's session expired.
constexpr uint8_t kVersion = 2;
constexpr size_t kHeaderSize = 8;
// Byte sizes of the fixed parts that follow the header.
constexpr size_t kFetchRequestFixed = 16;   // u32 table, u32 reserved, u64 key count
constexpr size_t kFetchResponseFixed = 16;  // u32 table, u32 dim, u64 key count
constexpr size_t kPushFixed =
    40;  // u64 client, u64 sequence, u64 key, u32 table, u32 dim, u64 count
constexpr size_t kForwardFixed = 16;  // u64 epoch, u64 lsn (then the push body)
// Header flag of a forwarded push: a u64 stamp follows the lsn.
constexpr uint16_t kForwardStamped = 1;
constexpr size_t kSyncIdFixed = 24;  // a forwarded sync's u64 client, u64 sequence, u64 key
// u64 client, u64 sequence, u8 flags, 3 reserved, u32 minimum generation (when expired)
constexpr size_t kAckFixed = 24;
constexpr uint8_t kAckDuplicate = 1;
constexpr uint8_t kAckExpired = 2;
constexpr size_t kErrorFixed = 8;  // u32 code, u32 message length
constexpr uint32_t kMaxErrorMessage = 64 * 1024;

void PutHeader(WireWriter& w, MessageType type, uint16_t flags = 0) {
  w.PutU32(kMagic);
  w.PutU8(kVersion);
  w.PutU8(static_cast<uint8_t>(type));
  w.PutU16(flags);
}

// `flags`, when given, receives the header's flag bits among `allowed`; others are refused.
Status CheckHeader(WireReader& r, MessageType expected, uint16_t allowed = 0,
                   uint16_t* flags = nullptr) {
  uint32_t magic;
  uint8_t version, type;
  uint16_t reserved;
  if (!r.GetU32(&magic) || !r.GetU8(&version) || !r.GetU8(&type) || !r.GetU16(&reserved)) {
    return DataLoss("ps message shorter than its 8-byte header");
  }
  if (magic != kMagic) return DataLoss("ps message: bad magic");
  if (version != kVersion) {
    return DataLoss("ps message: unsupported version " + std::to_string(version));
  }
  if ((reserved & ~allowed) != 0) return DataLoss("ps message: reserved header bits set");
  if (flags != nullptr) *flags = reserved;
  if (type != static_cast<uint8_t>(expected)) {
    return DataLoss("ps message: type " + std::to_string(type) + ", expected " +
                    std::to_string(static_cast<int>(expected)));
  }
  return Status::Ok();
}

Status CheckOutSize(std::span<std::byte> out, size_t want, const char* what) {
  if (out.size() != want) {
    return InvalidArgument(std::string(what) + ": output span is " + std::to_string(out.size()) +
                           " bytes, EncodedSize says " + std::to_string(want));
  }
  return Status::Ok();
}

// Checks a key count and dim from the wire and the exact number of bytes they imply.
Status CheckCounts(uint64_t key_count, uint64_t dim, const char* what) {
  if (key_count > kMaxKeysPerMessage) {
    return DataLoss(std::string(what) + ": key count " + std::to_string(key_count) +
                    " above the limit");
  }
  // key_count <= 2^24 and dim < 2^32, so the product fits in 64 bits.
  if (key_count * dim > kMaxValuesPerMessage) {
    return DataLoss(std::string(what) + ": " + std::to_string(key_count) + " keys x dim " +
                    std::to_string(dim) + " above the value limit");
  }
  return Status::Ok();
}

// A row width carried by a message: a table's dim, 1..kMaxDim. 0 would make every row empty
// (and a row pointer null); a larger one names no table and only inflates what a reader sizes.
bool DimInRange(uint64_t dim) {
  return dim >= 1 && dim <= kMaxDim;
}

Status CheckDim(uint64_t dim, const char* what) {
  if (!DimInRange(dim)) {
    return DataLoss(std::string(what) + ": dim " + std::to_string(dim) + " outside 1.." +
                    std::to_string(kMaxDim));
  }
  return Status::Ok();
}

Status CheckExactRemaining(const WireReader& r, uint64_t want, const char* what) {
  if (r.remaining() != want) {
    return DataLoss(std::string(what) + ": body is " + std::to_string(r.remaining()) +
                    " bytes, counts say " + std::to_string(want));
  }
  return Status::Ok();
}

// Encoders refuse what a decoder would refuse, so nothing we send is rejected by a peer.
Status CheckPushShape(const PushRequest& p, const char* what) {
  if (p.keys.size() > kMaxKeysPerMessage ||
      static_cast<uint64_t>(p.keys.size()) * p.dim > kMaxValuesPerMessage) {
    return InvalidArgument(std::string(what) + ": too many keys or values");
  }
  if (!DimInRange(p.dim)) {
    return InvalidArgument(std::string(what) + ": dim " + std::to_string(p.dim) + " outside 1.." +
                           std::to_string(kMaxDim));
  }
  if (p.gradients.size() != p.keys.size() * p.dim) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(p.gradients.size()) +
                           " gradients for " + std::to_string(p.keys.size()) + " keys x dim " +
                           std::to_string(p.dim));
  }
  if (p.id.sequence == 0) return InvalidArgument(std::string(what) + ": push sequence 0");
  return Status::Ok();
}

size_t PushBodySize(size_t key_count, uint32_t dim) {
  return kPushFixed + key_count * sizeof(uint64_t) + key_count * dim * sizeof(float);
}

void PutPushBody(WireWriter& w, const PushRequest& p) {
  w.PutU64(p.id.client_id);
  w.PutU64(p.id.sequence);
  w.PutU64(p.client_key);
  w.PutU32(p.table_id);
  w.PutU32(p.dim);
  w.PutU64(p.keys.size());
  w.PutU64s(p.keys);
  w.PutF32s(p.gradients);
}

Status GetPushBody(WireReader& r, PushRequest* p, const char* what) {
  uint64_t key_count;
  if (!r.GetU64(&p->id.client_id) || !r.GetU64(&p->id.sequence) || !r.GetU64(&p->client_key) ||
      !r.GetU32(&p->table_id) || !r.GetU32(&p->dim) || !r.GetU64(&key_count)) {
    return DataLoss(std::string(what) + ": truncated");
  }
  if (p->id.sequence == 0) return DataLoss(std::string(what) + ": push sequence 0");
  BX_RETURN_IF_ERROR(CheckDim(p->dim, what));
  BX_RETURN_IF_ERROR(CheckCounts(key_count, p->dim, what));
  BX_RETURN_IF_ERROR(CheckExactRemaining(
      r, key_count * sizeof(uint64_t) + key_count * p->dim * sizeof(float), what));
  p->keys.resize(key_count);
  p->gradients.resize(key_count * p->dim);
  r.GetU64s(p->keys);
  r.GetF32s(p->gradients);
  return Status::Ok();
}

}  // namespace

Result<MessageType> PeekMessageType(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  uint32_t magic;
  uint8_t version, type;
  if (!r.GetU32(&magic) || !r.GetU8(&version) || !r.GetU8(&type)) {
    return DataLoss("ps message shorter than its header");
  }
  if (magic != kMagic || version != kVersion) return DataLoss("ps message: bad magic or version");
  if (type < static_cast<uint8_t>(MessageType::kFetchRequest) ||
      type > static_cast<uint8_t>(MessageType::kSyncBatch)) {
    return DataLoss("ps message: unknown type " + std::to_string(type));
  }
  return static_cast<MessageType>(type);
}

// ---- Fetch ----------------------------------------------------------------------------------

size_t FetchRequestSize(size_t key_count) {
  return kHeaderSize + kFetchRequestFixed + key_count * sizeof(uint64_t);
}

Status EncodeFetchRequest(const FetchRequest& request, std::span<std::byte> out) {
  if (request.keys.size() > kMaxKeysPerMessage) {
    return InvalidArgument("fetch request: too many keys");
  }
  BX_RETURN_IF_ERROR(CheckOutSize(out, FetchRequestSize(request.keys.size()), "fetch request"));
  WireWriter w(out);
  PutHeader(w, MessageType::kFetchRequest);
  w.PutU32(request.table_id);
  w.PutU32(0);
  w.PutU64(request.keys.size());
  w.PutU64s(request.keys);
  return Status::Ok();
}

namespace {

// Reads and checks a fetch request up to its keys, leaving `r` at the first key.
Result<FetchRequestShape> ReadFetchRequestShape(WireReader& r) {
  BX_RETURN_IF_ERROR(CheckHeader(r, MessageType::kFetchRequest));
  FetchRequestShape shape;
  uint32_t reserved;
  if (!r.GetU32(&shape.table_id) || !r.GetU32(&reserved) || !r.GetU64(&shape.key_count)) {
    return DataLoss("fetch request: truncated");
  }
  if (reserved != 0) return DataLoss("fetch request: reserved field set");
  BX_RETURN_IF_ERROR(CheckCounts(shape.key_count, 0, "fetch request"));
  BX_RETURN_IF_ERROR(CheckExactRemaining(r, shape.key_count * sizeof(uint64_t), "fetch request"));
  return shape;
}

}  // namespace

Result<FetchRequestShape> DecodeFetchRequestShape(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  return ReadFetchRequestShape(r);
}

Result<FetchRequest> DecodeFetchRequest(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  BX_ASSIGN_OR_RETURN(FetchRequestShape shape, ReadFetchRequestShape(r));
  FetchRequest request;
  request.table_id = shape.table_id;
  request.keys.resize(shape.key_count);
  r.GetU64s(request.keys);
  return request;
}

size_t FetchResponseSize(size_t key_count, uint32_t dim) {
  return kHeaderSize + kFetchResponseFixed + key_count * dim * sizeof(float);
}

Status CheckFetchResponseBounds(uint64_t key_count, uint32_t dim) {
  if (!DimInRange(dim)) return InvalidArgument("fetch response: dim out of range");
  // key_count <= 2^24 and dim <= 2^16 once the first test passes: the product fits.
  if (key_count > kMaxKeysPerMessage || key_count * dim > kMaxValuesPerMessage) {
    return InvalidArgument("fetch response: too many values: " + std::to_string(key_count) +
                           " keys x dim " + std::to_string(dim) + " above the bound of " +
                           std::to_string(kMaxValuesPerMessage) + " values per message");
  }
  return Status::Ok();
}

Status EncodeFetchResponseHeader(uint32_t table_id, uint32_t dim, uint64_t key_count,
                                 std::span<std::byte> out) {
  BX_RETURN_IF_ERROR(CheckFetchResponseBounds(key_count, dim));
  BX_RETURN_IF_ERROR(CheckOutSize(out, FetchResponseSize(key_count, dim), "fetch response"));
  WireWriter w(out);
  PutHeader(w, MessageType::kFetchResponse);
  w.PutU32(table_id);
  w.PutU32(dim);
  w.PutU64(key_count);
  return Status::Ok();
}

std::span<std::byte> FetchResponseValues(std::span<std::byte> out) {
  return out.subspan(kHeaderSize + kFetchResponseFixed);
}

void FetchResponseView::CopyRow(uint64_t row, std::span<float> out) const {
  std::memcpy(out.data(), values_ + row * dim_ * sizeof(float), dim_ * sizeof(float));
}

Result<FetchResponseView> DecodeFetchResponse(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  BX_RETURN_IF_ERROR(CheckHeader(r, MessageType::kFetchResponse));
  FetchResponseView v;
  if (!r.GetU32(&v.table_id_) || !r.GetU32(&v.dim_) || !r.GetU64(&v.key_count_)) {
    return DataLoss("fetch response: truncated");
  }
  BX_RETURN_IF_ERROR(CheckDim(v.dim_, "fetch response"));
  BX_RETURN_IF_ERROR(CheckCounts(v.key_count_, v.dim_, "fetch response"));
  BX_RETURN_IF_ERROR(
      CheckExactRemaining(r, v.key_count_ * v.dim_ * sizeof(float), "fetch response"));
  v.values_ = bytes.data() + r.position();
  return v;
}

// ---- Push -----------------------------------------------------------------------------------

size_t PushRequestSize(size_t key_count, uint32_t dim) {
  return kHeaderSize + PushBodySize(key_count, dim);
}

Status EncodePushRequest(const PushRequest& request, std::span<std::byte> out) {
  BX_RETURN_IF_ERROR(CheckPushShape(request, "push request"));
  BX_RETURN_IF_ERROR(
      CheckOutSize(out, PushRequestSize(request.keys.size(), request.dim), "push request"));
  WireWriter w(out);
  PutHeader(w, MessageType::kPushRequest);
  PutPushBody(w, request);
  return Status::Ok();
}

Result<PushRequest> DecodePushRequest(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  BX_RETURN_IF_ERROR(CheckHeader(r, MessageType::kPushRequest));
  PushRequest request;
  BX_RETURN_IF_ERROR(GetPushBody(r, &request, "push request"));
  return request;
}

Status RestampPushRequest(std::span<std::byte> encoded, PushId id, uint64_t client_key) {
  WireReader r(encoded);
  BX_RETURN_IF_ERROR(CheckHeader(r, MessageType::kPushRequest));
  if (encoded.size() < kHeaderSize + kPushFixed) return DataLoss("push request: truncated");
  if (id.sequence == 0) return InvalidArgument("push request: push sequence 0");
  WireWriter w(encoded.subspan(kHeaderSize, 24));
  w.PutU64(id.client_id);
  w.PutU64(id.sequence);
  w.PutU64(client_key);
  return Status::Ok();
}

size_t PushAckSize() {
  return kHeaderSize + kAckFixed;
}

Status EncodePushAck(const PushAck& ack, std::span<std::byte> out) {
  BX_RETURN_IF_ERROR(CheckOutSize(out, PushAckSize(), "push ack"));
  WireWriter w(out);
  PutHeader(w, MessageType::kPushAck);
  w.PutU64(ack.id.client_id);
  w.PutU64(ack.id.sequence);
  if (ack.duplicate && ack.session_expired) {
    return InvalidArgument("push ack: a duplicate cannot be expired");
  }
  w.PutU8((ack.duplicate ? kAckDuplicate : 0) | (ack.session_expired ? kAckExpired : 0));
  w.PutZeros(3);
  w.PutU32(ack.session_expired ? ack.min_generation : 0);
  return Status::Ok();
}

Result<PushAck> DecodePushAck(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  BX_RETURN_IF_ERROR(CheckHeader(r, MessageType::kPushAck));
  PushAck ack;
  uint8_t flags;
  std::byte reserved[3];
  if (!r.GetU64(&ack.id.client_id) || !r.GetU64(&ack.id.sequence) || !r.GetU8(&flags) ||
      !r.GetBytes(reserved, sizeof reserved) || !r.GetU32(&ack.min_generation)) {
    return DataLoss("push ack: truncated");
  }
  if (r.remaining() != 0) return DataLoss("push ack: trailing bytes");
  if ((flags & ~(kAckDuplicate | kAckExpired)) != 0 || flags == (kAckDuplicate | kAckExpired)) {
    return DataLoss("push ack: unknown flags");
  }
  for (std::byte b : reserved) {
    if (b != std::byte{0}) return DataLoss("push ack: reserved bytes set");
  }
  ack.duplicate = (flags & kAckDuplicate) != 0;
  ack.session_expired = (flags & kAckExpired) != 0;
  if (!ack.session_expired && ack.min_generation != 0) {
    return DataLoss("push ack: a minimum generation without expiry");
  }
  return ack;
}

// ---- Replication ----------------------------------------------------------------------------

size_t ForwardedPushSize(size_t key_count, uint32_t dim, bool stamped) {
  return kHeaderSize + kForwardFixed + (stamped ? sizeof(uint64_t) : 0) +
         PushBodySize(key_count, dim);
}

size_t ForwardSize(const PushRequest& push) {
  if (push.sync) return kHeaderSize + kForwardFixed + kSyncIdFixed + SyncBatchSize(*push.sync);
  return ForwardedPushSize(push.keys.size(), push.dim, push.stamp_ms != 0);
}

Status EncodeForward(uint64_t epoch, uint64_t lsn, const PushRequest& push,
                     std::span<std::byte> out) {
  if (push.sync) {
    // A sync record: the push's id, then the batch as a follower received it.
    BX_RETURN_IF_ERROR(CheckOutSize(out, ForwardSize(push), "forwarded sync"));
    WireWriter w(out);
    PutHeader(w, MessageType::kForwardedSync);
    w.PutU64(epoch);
    w.PutU64(lsn);
    w.PutU64(push.id.client_id);
    w.PutU64(push.id.sequence);
    w.PutU64(push.client_key);
    return EncodeSyncBatch(*push.sync, out.subspan(w.position()));
  }
  BX_RETURN_IF_ERROR(CheckPushShape(push, "forwarded push"));
  const bool stamped = push.stamp_ms != 0;
  BX_RETURN_IF_ERROR(
      CheckOutSize(out, ForwardedPushSize(push.keys.size(), push.dim, stamped), "forwarded push"));
  WireWriter w(out);
  PutHeader(w, MessageType::kForwardedPush, stamped ? kForwardStamped : 0);
  w.PutU64(epoch);
  w.PutU64(lsn);
  if (stamped) w.PutU64(push.stamp_ms);
  PutPushBody(w, push);
  return Status::Ok();
}

Status EncodeForwardedPush(const ForwardedPush& forwarded, std::span<std::byte> out) {
  return EncodeForward(forwarded.epoch, forwarded.lsn, forwarded.push, out);
}

Result<ForwardedPush> DecodeForwardedPush(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  if (Result<MessageType> type = PeekMessageType(bytes);
      type.ok() && *type == MessageType::kForwardedSync) {
    BX_RETURN_IF_ERROR(CheckHeader(r, MessageType::kForwardedSync));
    ForwardedPush f;
    PushRequest& p = f.push;
    if (!r.GetU64(&f.epoch) || !r.GetU64(&f.lsn) || !r.GetU64(&p.id.client_id) ||
        !r.GetU64(&p.id.sequence) || !r.GetU64(&p.client_key)) {
      return DataLoss("forwarded sync: truncated");
    }
    if (f.lsn == 0 || p.id.sequence == 0) return DataLoss("forwarded sync: lsn or sequence 0");
    BX_ASSIGN_OR_RETURN(SyncBatch batch, DecodeSyncBatch(bytes.subspan(r.position())));
    p.dim = 1;
    p.sync = std::make_shared<const SyncBatch>(std::move(batch));
    return f;
  }
  uint16_t flags = 0;
  BX_RETURN_IF_ERROR(CheckHeader(r, MessageType::kForwardedPush, kForwardStamped, &flags));
  ForwardedPush f;
  uint64_t stamp = 0;
  if (!r.GetU64(&f.epoch) || !r.GetU64(&f.lsn) ||
      ((flags & kForwardStamped) != 0 && !r.GetU64(&stamp))) {
    return DataLoss("forwarded push: truncated");
  }
  if (f.lsn == 0) return DataLoss("forwarded push: lsn 0");
  if ((flags & kForwardStamped) != 0 && stamp == 0) return DataLoss("forwarded push: stamp 0");
  BX_RETURN_IF_ERROR(GetPushBody(r, &f.push, "forwarded push"));
  f.push.stamp_ms = stamp;
  return f;
}

// ---- Serving sync ---------------------------------------------------------------------------

namespace {
constexpr size_t kSyncFixed = 32;       // u64 epoch, u64 lsn, u64 asked at, u32 flags, u32 tables
constexpr size_t kSyncTableFixed = 24;  // u32 id, u32 stride, u64 dropped, u64 rows
constexpr uint32_t kSyncFull = 1;
// A row's floats: its weights, and as many of optimiser state at most (Adagrad).
bool StrideInRange(uint64_t stride) {
  return stride >= 1 && stride <= 2 * uint64_t{kMaxDim};
}
}  // namespace

uint64_t SyncBatchPayloadBytes(const SyncBatch& batch) {
  uint64_t bytes = 0;
  for (const SyncTableRows& t : batch.tables) {
    bytes +=
        (t.dropped.size() + t.keys.size()) * sizeof(uint64_t) + t.states.size() * sizeof(float);
  }
  return bytes;
}

size_t SyncBatchSize(const SyncBatch& batch) {
  return kHeaderSize + kSyncFixed + batch.tables.size() * kSyncTableFixed +
         SyncBatchPayloadBytes(batch);
}

Status EncodeSyncBatch(const SyncBatch& batch, std::span<std::byte> out) {
  BX_RETURN_IF_ERROR(CheckOutSize(out, SyncBatchSize(batch), "sync batch"));
  WireWriter w(out);
  PutHeader(w, MessageType::kSyncBatch);
  w.PutU64(batch.source_epoch);
  w.PutU64(batch.source_lsn);
  w.PutU64(batch.asked_at_ms);
  w.PutU32(batch.full ? kSyncFull : 0);
  w.PutU32(static_cast<uint32_t>(batch.tables.size()));
  for (const SyncTableRows& t : batch.tables) {
    if (!StrideInRange(t.stride) || t.states.size() != t.keys.size() * t.stride) {
      return InvalidArgument("sync batch: table " + std::to_string(t.table_id) +
                             ": rows and states disagree");
    }
    w.PutU32(t.table_id);
    w.PutU32(t.stride);
    w.PutU64(t.dropped.size());
    w.PutU64(t.keys.size());
  }
  for (const SyncTableRows& t : batch.tables) {
    w.PutU64s(t.dropped);
    w.PutU64s(t.keys);
    w.PutF32s(t.states);
  }
  return Status::Ok();
}

Result<SyncBatch> DecodeSyncBatch(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  BX_RETURN_IF_ERROR(CheckHeader(r, MessageType::kSyncBatch));
  SyncBatch batch;
  uint32_t flags = 0, tables = 0;
  if (!r.GetU64(&batch.source_epoch) || !r.GetU64(&batch.source_lsn) ||
      !r.GetU64(&batch.asked_at_ms) || !r.GetU32(&flags) || !r.GetU32(&tables)) {
    return DataLoss("sync batch: truncated");
  }
  if ((flags & ~kSyncFull) != 0) return DataLoss("sync batch: unknown flags");
  batch.full = (flags & kSyncFull) != 0;
  if (uint64_t{tables} * kSyncTableFixed > r.remaining()) return DataLoss("sync batch: truncated");
  batch.tables.resize(tables);
  std::vector<std::pair<uint64_t, uint64_t>> counts(tables);  // dropped, rows
  uint64_t payload = 0;
  for (uint32_t i = 0; i < tables; ++i) {
    SyncTableRows& t = batch.tables[i];
    if (!r.GetU32(&t.table_id) || !r.GetU32(&t.stride) || !r.GetU64(&counts[i].first) ||
        !r.GetU64(&counts[i].second)) {
      return DataLoss("sync batch: truncated");
    }
    if (!StrideInRange(t.stride)) return DataLoss("sync batch: row stride out of range");
    BX_RETURN_IF_ERROR(CheckCounts(counts[i].second, t.stride, "sync batch"));
    if (counts[i].first > kMaxKeysPerMessage) return DataLoss("sync batch: too many dropped keys");
    payload += (counts[i].first + counts[i].second) * sizeof(uint64_t) +
               counts[i].second * t.stride * sizeof(float);
  }
  BX_RETURN_IF_ERROR(CheckExactRemaining(r, payload, "sync batch"));
  for (uint32_t i = 0; i < tables; ++i) {
    SyncTableRows& t = batch.tables[i];
    t.dropped.resize(counts[i].first);
    t.keys.resize(counts[i].second);
    t.states.resize(counts[i].second * t.stride);
    r.GetU64s(t.dropped);
    r.GetU64s(t.keys);
    r.GetBytes(t.states.data(), t.states.size() * sizeof(float));
  }
  return batch;
}

// ---- Errors ---------------------------------------------------------------------------------

size_t ErrorMessageSize(const Status& status) {
  size_t n = std::min<size_t>(status.message().size(), kMaxErrorMessage);
  return kHeaderSize + kErrorFixed + n;
}

Status EncodeErrorMessage(const Status& status, std::span<std::byte> out) {
  if (status.ok()) return InvalidArgument("error message: status is OK");
  BX_RETURN_IF_ERROR(CheckOutSize(out, ErrorMessageSize(status), "error message"));
  size_t n = std::min<size_t>(status.message().size(), kMaxErrorMessage);
  WireWriter w(out);
  PutHeader(w, MessageType::kError);
  w.PutU32(static_cast<uint32_t>(status.code()));
  w.PutU32(static_cast<uint32_t>(n));
  w.PutBytes(status.message().data(), n);
  return Status::Ok();
}

Status DecodeErrorMessage(std::span<const std::byte> bytes) {
  WireReader r(bytes);
  BX_RETURN_IF_ERROR(CheckHeader(r, MessageType::kError));
  uint32_t code, length;
  if (!r.GetU32(&code) || !r.GetU32(&length)) return DataLoss("error message: truncated");
  if (code == 0 || code > static_cast<uint32_t>(kLastStatusCode)) {
    return DataLoss("error message: bad status code " + std::to_string(code));
  }
  if (length > kMaxErrorMessage || r.remaining() != length) {
    return DataLoss("error message: bad message length");
  }
  std::string message(length, '\0');
  r.GetBytes(message.data(), length);
  return Status(static_cast<StatusCode>(code), std::move(message));
}

}  // namespace bx::ps
