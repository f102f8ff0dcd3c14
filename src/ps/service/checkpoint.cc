// Checkpoints on the network (docs/PS.md "Checkpoints"): the "ps.Checkpoint*" methods a
// primary serves, WriteCheckpoint that asks every shard's primary in turn and writes the files,
// and a new server's RestoreFrom.
#include <chrono>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "bx/ps/checkpoint.h"
#include "ps/checkpoint_files.h"
#include "ps/service/ps_internals.h"
#include "ps/service/ps_service.h"

namespace bx::ps {
namespace {

using Clock = std::chrono::steady_clock;
// A checkpoint's caller asks again this often while the primary prepares its snapshot, which
// it says with an Unavailable whose message holds kAskAgainMark (an Unavailable without it, a
// replica that cannot be reached, sends the caller on to the next replica).
constexpr std::chrono::milliseconds kAskAgain{20};
constexpr std::string_view kAskAgainMark = "; ask again";
// A snapshot nobody read a piece of for this long is taken as abandoned by its caller.
constexpr std::chrono::seconds kAbandoned{30};

uint64_t UnixMillis() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

// The primary's side: one checkpoint snapshot at a time, prepared on a thread of its own (the
// copy, the wait for its position to be durable, the encoding) while the caller asks again,
// and kept until every piece of it has been served or the next checkpoint replaces it.
class PsServerCore::CheckpointDesk {
 public:
  explicit CheckpointDesk(ShardReplica* replica) : replica_(replica) {}
  ~CheckpointDesk() {
    std::thread preparing;
    {
      std::lock_guard lock(mu_);
      preparing = std::move(preparing_);
    }
    if (preparing.joinable()) preparing.join();
  }

  // The snapshot for the caller's `request` id once it is ready (token, epoch, lsn, bytes);
  // Unavailable ("ask again") while it is prepared.
  Result<rpc::Message> Begin(uint64_t request, std::chrono::milliseconds durable_timeout) {
    std::lock_guard lock(mu_);
    if (request_ == request && request != 0) {
      if (bytes_)
        return U64Message({token_, position_.epoch, position_.lsn, uint64_t(bytes_->size())});
      if (!failure_.ok()) {
        request_ = 0;  // the next ask starts again
        return failure_;
      }
      return Unavailable("preparing the checkpoint snapshot" + std::string(kAskAgainMark));
    }
    if (busy_) return Unavailable("preparing another checkpoint" + std::string(kAskAgainMark));
    // Another caller's snapshot still being read is not replaced under it (two checkpoints at
    // once, a periodic one beside a manual one, failed the first with NotFound mid-transfer);
    // one left unread for kAbandoned is.
    if (bytes_ && Clock::now() - last_read_ < kAbandoned) {
      return Unavailable("another checkpoint is being read" + std::string(kAskAgainMark));
    }
    if (preparing_.joinable()) preparing_.join();  // finished
    request_ = request;
    token_ = ++last_token_;
    bytes_.reset();
    failure_ = Status::Ok();
    busy_ = true;
    preparing_ = std::thread([this, token = token_, durable_timeout] {
      Result<ShardReplica::JoinSnapshot> snapshot =
          replica_->SnapshotForCheckpoint(durable_timeout);
      std::lock_guard lock(mu_);
      busy_ = false;
      if (token != token_) return;
      if (!snapshot.ok()) {
        failure_ = snapshot.status();
        return;
      }
      position_ = snapshot->position;
      bytes_ = std::make_shared<const std::vector<std::byte>>(std::move(snapshot->bytes));
      served_ = 0;
      last_read_ = Clock::now();
    });
    return Unavailable("preparing the checkpoint snapshot" + std::string(kAskAgainMark));
  }

  void Chunk(rpc::ServerCall call) {
    uint64_t token = 0, offset = 0;
    if (!GetU64s(Bytes(call.request()), {&token, &offset})) {
      return call.Fail(InvalidArgument("ps.CheckpointChunk: malformed request"));
    }
    std::shared_ptr<const std::vector<std::byte>> bytes;
    {
      std::lock_guard lock(mu_);
      if (token == token_) {
        bytes = bytes_;
        last_read_ = Clock::now();
      }
    }
    if (!bytes) return call.Fail(NotFound("ps.CheckpointChunk: no such checkpoint snapshot"));
    const size_t sent = RespondWithChunk(std::move(call), *bytes, offset);
    std::lock_guard lock(mu_);
    // Every byte served: its memory goes back. Counted, not judged by the last offset: the
    // reader asks for several pieces at once and the workers may answer the last one first
    // (an earlier piece then found no snapshot: ps_checkpoint_restore failed so in CI).
    if (sent == 0 || token != token_ || !bytes_) return;
    served_ += sent;
    if (served_ >= bytes_->size()) {
      bytes_.reset();
      last_ = {position_, UnixMillis()};
    }
  }

  // The position and time of the last checkpoint snapshot read to its end ({}, 0: none).
  std::pair<ShardReplica::Position, uint64_t> Last() {
    std::lock_guard lock(mu_);
    return last_;
  }

 private:
  ShardReplica* const replica_;
  std::mutex mu_;
  uint64_t request_ = 0, token_ = 0, last_token_ = 0;  // guarded by mu_, as are the rest
  bool busy_ = false;
  ShardReplica::Position position_;
  std::shared_ptr<const std::vector<std::byte>> bytes_;
  uint64_t served_ = 0;  // bytes of bytes_ answered so far
  Status failure_;
  std::pair<ShardReplica::Position, uint64_t> last_{};
  Clock::time_point last_read_;  // of bytes_: when it was ready, or a piece of it last read
  std::thread preparing_;
};

std::shared_ptr<PsServerCore::CheckpointDesk> PsServerCore::NewCheckpointDesk(
    ShardReplica* replica) {
  return std::make_shared<CheckpointDesk>(replica);
}

void PsServerCore::OnCheckpoint(rpc::ServerCall call) {
  uint64_t request = 0, durable_timeout_ms = 0;
  if (!GetU64s(Bytes(call.request()), {&request, &durable_timeout_ms})) {
    return call.Fail(InvalidArgument("ps.Checkpoint: malformed request"));
  }
  Result<rpc::Message> offer =
      checkpoints_->Begin(request, std::chrono::milliseconds(durable_timeout_ms));
  if (!offer.ok()) return call.Fail(offer.status());
  CountCheckpointOffered();
  call.Respond(std::move(offer).value());
}

void PsServerCore::OnCheckpointChunk(rpc::ServerCall call) {
  checkpoints_->Chunk(std::move(call));
}

std::pair<ShardReplica::Position, uint64_t> PsServerCore::LastCheckpoint() const {
  return checkpoints_->Last();
}

Status PsServerCore::RestoreFrom(const std::string& dir, uint32_t shard, uint32_t shard_count) {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<ShardState> restored,
                      LoadCheckpointShard(dir, shard, shard_count));
  return replica_.Restore(*restored);
}

Status PsServer::RestoreFrom(const std::string& checkpoint_dir, uint32_t shard,
                             uint32_t shard_count) {
  return core_->RestoreFrom(checkpoint_dir, shard, shard_count);
}

namespace {

// Shard `shard`'s snapshot from whichever of its replicas is primary, written to
// dir/CheckpointShardFile(shard).
Result<CheckpointShard> CheckpointOneShard(const ClusterSpec& cluster, uint32_t shard,
                                           const std::string& dir, const CheckpointOptions& options,
                                           uint64_t request) {
  const Clock::time_point deadline = Clock::now() + options.shard_timeout;
  rpc::ClientOptions client_options = options.client;
  if (client_options.transport.auth_secret.empty()) {
    client_options.transport.auth_secret = cluster.secret;
  }
  if (client_options.transport.privileged_secret.empty()) {
    client_options.transport.privileged_secret = cluster.replica_secret;
  }
  std::vector<std::unique_ptr<rpc::Client>> clients;
  for (const ReplicaSpec& r : cluster.shards[shard].replicas) {
    rpc::ReplicaAddress address{cluster.transport == "tcp" ? "" : r.rdma, r.tcp};
    BX_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Client> client,
                        rpc::Client::Create({address}, client_options));
    clients.push_back(std::move(client));
  }
  const uint64_t durable_ms = uint64_t(
      std::chrono::duration_cast<std::chrono::milliseconds>(options.shard_timeout).count());
  // Every replica is asked in turn until the primary offers its snapshot; the others answer
  // FailedPrecondition (not primary) at once, the primary Unavailable while it prepares.
  Status last = Unavailable("no replica answered");
  for (size_t turn = 0; Clock::now() < deadline; ++turn) {
    rpc::Client& client = *clients[turn % clients.size()];
    BX_ASSIGN_OR_RETURN(rpc::Message request_message, U64Message({request, durable_ms}));
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    Result<rpc::Message> offer = CallOnce(client, kCheckpointMethod, std::move(request_message),
                                          std::max(left, std::chrono::milliseconds(1)));
    if (!offer.ok()) {
      last = offer.status();
      // Unavailable from the primary: preparing; ask the same replica again shortly.
      if (last.code() == StatusCode::kUnavailable &&
          last.message().find(kAskAgainMark) != std::string::npos) {
        --turn;
        std::this_thread::sleep_for(kAskAgain);
      } else if (last.code() != StatusCode::kFailedPrecondition &&
                 last.code() != StatusCode::kUnavailable &&
                 last.code() != StatusCode::kDeadlineExceeded) {
        return last.WithContext("shard " + std::to_string(shard) + ": ps.Checkpoint");
      } else if (turn % clients.size() == clients.size() - 1) {
        std::this_thread::sleep_for(kAskAgain);  // no primary now: a failover may be under way
      }
      continue;
    }
    uint64_t token = 0, size = 0;
    CheckpointShard out;
    out.shard = shard;
    out.file = CheckpointShardFile(shard);
    if (!GetU64s(Bytes(*offer), {&token, &out.epoch, &out.lsn, &size})) {
      return DataLoss("shard " + std::to_string(shard) + ": ps.Checkpoint: malformed reply");
    }
    BX_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file, AtomicFile::Create(dir + "/" + out.file));
    BX_RETURN_IF_ERROR(ReadChunks(
        client, kCheckpointChunkMethod, token, size,
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                 std::chrono::milliseconds(1)),
        [&](std::span<const std::byte> chunk) { return file->Append(chunk); }));
    BX_RETURN_IF_ERROR(file->Commit());
    out.bytes = file->bytes();
    return out;
  }
  return DeadlineExceeded("shard " + std::to_string(shard) + ": no checkpoint within " +
                          std::to_string(options.shard_timeout.count()) + " ms (" +
                          last.ToString() + ")");
}

}  // namespace

Result<CheckpointManifest> WriteCheckpoint(const ClusterSpec& cluster, const std::string& dir,
                                           const CheckpointOptions& options) {
  if (cluster.shards.empty()) return InvalidArgument("checkpoint: the cluster has no shards");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return Status::FromErrno(error.value(), "checkpoint: create " + dir);
  if (std::filesystem::exists(dir + "/" + kCheckpointManifestFile)) {
    return FailedPrecondition("checkpoint: " + dir + " already holds a checkpoint");
  }
  CheckpointManifest manifest;
  manifest.shard_count = uint32_t(cluster.shards.size());
  manifest.created_unix_ms = UnixMillis();
  // Names this checkpoint at the primaries (a retried ask finds its own snapshot): random, so
  // that two checkpoints started in the same millisecond (two threads) are not taken for one.
  std::random_device entropy;
  const uint64_t request = ((uint64_t(entropy()) << 32) | entropy()) | 1;
  for (uint32_t s = 0; s < manifest.shard_count; ++s) {
    BX_ASSIGN_OR_RETURN(CheckpointShard shard,
                        CheckpointOneShard(cluster, s, dir, options, request));
    manifest.shards.push_back(std::move(shard));
  }
  BX_RETURN_IF_ERROR(WriteCheckpointManifest(dir, manifest));
  return manifest;
}

}  // namespace bx::ps
