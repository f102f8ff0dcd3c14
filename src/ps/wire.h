// Wire messages of the parameter server and their codecs.
//
// Every message starts with an 8-byte header (u32 magic "BXPS", u8 version 2, u8 type,
// u16 reserved 0); all integers and floats are little-endian; layouts are in docs/PS.md.
// Encoders write into a caller-provided span whose size must be exactly EncodedSize(...), so a
// server can allocate one registered Buffer and write the reply straight into it. A fetch
// response is encoded in two steps: EncodeFetchResponseHeader writes the header, and the table
// writes the values in place (FetchResponseValues) — the values are never staged elsewhere.
//
// Decoders treat the bytes as hostile: every length and count is checked against the message
// size before it is used, sizes are computed without overflow, and any mismatch is a DataLoss
// Status. They never read outside the span and never crash. Pure functions: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bx/status.h"

namespace bx::ps {

enum class MessageType : uint8_t {
  kFetchRequest = 1,
  kFetchResponse = 2,
  kPushRequest = 3,
  kPushAck = 4,
  kForwardedPush = 5,  // primary -> backup
  kError = 6,
  kForwardedSync = 7,  // primary -> backup: a serving sync record (SyncBatch)
  kSyncBatch = 8,      // a training primary's changes for a follower (docs/PS.md "Serving sync")
};

// Which message a byte string holds (after checking the header), or DataLoss.
Result<MessageType> PeekMessageType(std::span<const std::byte> bytes);

// Bounds on what a decoder accepts (and an encoder produces).
inline constexpr uint64_t kMaxKeysPerMessage = 1ull << 24;    // 16 Mi keys
inline constexpr uint64_t kMaxValuesPerMessage = 1ull << 28;  // 1 GiB of floats

// A push is identified by the client that sent it and that client's sequence number. client_id
// names a session of one client with one shard: its upper 32 bits are a generation (the
// client's clock in seconds when the session started), the lower 32 random; the client numbers
// its pushes to the shard 1, 2, 3... A retry reuses the id. Sequence 0 is invalid. The shard
// binds the id to the key of its first push (PushRequest::client_key) and may forget it
// (docs/PS.md "Exactly once").
struct PushId {
  uint64_t client_id = 0;
  uint64_t sequence = 0;
  friend bool operator==(const PushId&, const PushId&) = default;
};

// ---- Fetch ----------------------------------------------------------------------------------

struct FetchRequest {
  uint32_t table_id = 0;
  std::vector<uint64_t> keys;
};

size_t FetchRequestSize(size_t key_count);
Status EncodeFetchRequest(const FetchRequest& request, std::span<std::byte> out);
Result<FetchRequest> DecodeFetchRequest(std::span<const std::byte> bytes);
// The table and key count of a well-formed fetch request, without copying its keys: a server
// checks the reply's bounds before it spends memory on the request.
struct FetchRequestShape {
  uint32_t table_id = 0;
  uint64_t key_count = 0;
};
Result<FetchRequestShape> DecodeFetchRequestShape(std::span<const std::byte> bytes);

// Response: header, table id, dim, key count, then key_count * dim floats, row i at
// [i*dim, (i+1)*dim), in request key order. The values start 8-byte aligned.
size_t FetchResponseSize(size_t key_count, uint32_t dim);
// Whether a response of key_count rows of dim floats is within the message bounds, checked
// before anything is allocated for it: a request's key count times its table's dim can ask for
// far more than the bounds (2^24 keys x dim 2^16). InvalidArgument naming the bound, else Ok.
Status CheckFetchResponseBounds(uint64_t key_count, uint32_t dim);
Status EncodeFetchResponseHeader(uint32_t table_id, uint32_t dim, uint64_t key_count,
                                 std::span<std::byte> out);
// The value area of an encoded (or header-encoded) fetch response, for the table to fill.
std::span<std::byte> FetchResponseValues(std::span<std::byte> out);

// A decoded fetch response: a view into the message bytes (no copy). The bytes must outlive it.
// Values may be unaligned in the caller's span, so they are read through memcpy.
class FetchResponseView {
 public:
  uint32_t table_id() const { return table_id_; }
  uint32_t dim() const { return dim_; }
  uint64_t key_count() const { return key_count_; }
  float value(uint64_t row, uint32_t column) const {
    float f;
    std::memcpy(&f, values_ + (row * dim_ + column) * sizeof(float), sizeof f);
    return f;
  }
  // Copies row `row` (dim floats) into `out`.
  void CopyRow(uint64_t row, std::span<float> out) const;
  // The raw little-endian value bytes (key_count * dim * 4).
  std::span<const std::byte> value_bytes() const {
    return {values_, static_cast<size_t>(key_count_ * dim_ * sizeof(float))};
  }

 private:
  friend Result<FetchResponseView> DecodeFetchResponse(std::span<const std::byte>);
  uint32_t table_id_ = 0;
  uint32_t dim_ = 0;
  uint64_t key_count_ = 0;
  const std::byte* values_ = nullptr;
};
Result<FetchResponseView> DecodeFetchResponse(std::span<const std::byte> bytes);

// ---- Serving sync (docs/PS.md "Serving sync") -------------------------------------------------

// One table's part of a sync: keys the source dropped (evicted) since the follower's position,
// then rows to store whole (weights and optimiser state, `stride` floats each).
struct SyncTableRows {
  uint32_t table_id = 0;
  uint32_t stride = 0;
  std::vector<uint64_t> dropped;
  std::vector<uint64_t> keys;
  std::vector<float> states;  // keys.size() * stride
};

// What brings one serving shard from the source position it holds to `source`: applied whole
// (drops first, then rows), or not at all. `full`: a whole copy; rows it lacks are dropped.
struct SyncBatch {
  uint64_t source_epoch = 0;
  uint64_t source_lsn = 0;
  // The follower's wall clock (ms since the Unix epoch) when it asked for the batch: the batch
  // holds every push the source applied before then, so now minus this bounds the lag.
  uint64_t asked_at_ms = 0;
  bool full = false;
  std::vector<SyncTableRows> tables;
};

// Bytes of keys and floats a batch carries (its share of a replication log's byte bound).
uint64_t SyncBatchPayloadBytes(const SyncBatch& batch);
size_t SyncBatchSize(const SyncBatch& batch);
Status EncodeSyncBatch(const SyncBatch& batch, std::span<std::byte> out);
Result<SyncBatch> DecodeSyncBatch(std::span<const std::byte> bytes);

// ---- Push -----------------------------------------------------------------------------------

// gradients holds keys.size() * dim floats, row i for keys[i]. A key may repeat; its gradients
// are then applied in order.
struct PushRequest {
  PushId id;
  // A secret of the session (random 64 bits): a push under a known id with another key is
  // refused, so no client can act under another's id.
  uint64_t client_key = 0;
  uint32_t table_id = 0;
  uint32_t dim = 0;
  std::vector<uint64_t> keys;
  std::vector<float> gradients;
  // Not part of a client's push: the primary's clock (ms since the Unix epoch) when it applied
  // the push, set by a primary whose shard has tables that expire rows and carried to backups
  // in the forwarded push, so that every replica expires rows at the same pushes. 0: unstamped.
  uint64_t stamp_ms = 0;
  // Set on a serving cluster's own sync record (never on a client's push, whose codec does not
  // carry it): the record replicates like a push, and its keys and gradients are empty.
  std::shared_ptr<const SyncBatch> sync;
};

size_t PushRequestSize(size_t key_count, uint32_t dim);
Status EncodePushRequest(const PushRequest& request, std::span<std::byte> out);
Result<PushRequest> DecodePushRequest(std::span<const std::byte> bytes);
// Rewrites the id and key of an encoded push request in place (a client moving its unsent
// push to a new session), after checking the header and size.
Status RestampPushRequest(std::span<std::byte> encoded, PushId id, uint64_t client_key);

struct PushAck {
  PushId id;
  bool duplicate = false;  // the push had already been applied; this ack is for a retry
  // Not applied: the shard does not know this session (it was evicted from the dedup record,
  // or the id is bound to another key). Start a new session whose generation is at least
  // min_generation; a push that an earlier attempt may have applied has an unknown outcome.
  bool session_expired = false;
  uint32_t min_generation = 0;
};

size_t PushAckSize();
Status EncodePushAck(const PushAck& ack, std::span<std::byte> out);
Result<PushAck> DecodePushAck(std::span<const std::byte> bytes);

// ---- Replication (primary -> backup) --------------------------------------------------------

// A push as the primary forwards it: the primary's epoch and the push's position (lsn, from 1)
// in that epoch's order of application. A stamped push (push.stamp_ms != 0) carries its stamp
// after the lsn, flagged in the header (bit 0 of its reserved field): a shard without tables that
// expire rows sends exactly what it sent before stamps existed.
struct ForwardedPush {
  uint64_t epoch = 0;
  uint64_t lsn = 0;
  PushRequest push;
};

size_t ForwardedPushSize(size_t key_count, uint32_t dim, bool stamped = false);
// The size of the forward of `push`: a push (stamped or not), or a sync record (kForwardedSync).
size_t ForwardSize(const PushRequest& push);
// Encodes the push at (epoch, lsn) straight from the primary's log entry: a 64 MiB push is
// copied once per backup, into the message, and not first into a ForwardedPush.
Status EncodeForward(uint64_t epoch, uint64_t lsn, const PushRequest& push,
                     std::span<std::byte> out);
Status EncodeForwardedPush(const ForwardedPush& forwarded, std::span<std::byte> out);
Result<ForwardedPush> DecodeForwardedPush(std::span<const std::byte> bytes);

// ---- Errors ---------------------------------------------------------------------------------

// An application-level error reply (unknown table, not primary, ...): code and message.
size_t ErrorMessageSize(const Status& status);
Status EncodeErrorMessage(const Status& status, std::span<std::byte> out);
// Returns the decoded Status (never OK), or DataLoss if the bytes are malformed.
Status DecodeErrorMessage(std::span<const std::byte> bytes);

}  // namespace bx::ps
