// Training-to-serving sync on the network (docs/PS.md "Serving sync"): the "ps.Sync*" methods a
// training primary serves, and the follower thread of a serving primary (bx/ps/serving_sync.h).
#include "bx/ps/serving_sync.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "bx/log.h"
#include "ps/service/ps_internals.h"
#include "ps/service/ps_service.h"

namespace bx::ps {
namespace {

using Clock = std::chrono::steady_clock;

// A prepared batch nobody read a piece of for this long is taken as abandoned by its follower.
constexpr std::chrono::seconds kAbandoned{30};
// Batches a training primary keeps at once: one per follower of it, and a few followers at most.
constexpr size_t kMaxPreparedBatches = 4;

uint64_t UnixMillis() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

uint64_t SyncLagMs(const ShardState::Synced& synced) {
  const uint64_t now = UnixMillis();
  return synced.asked_at_ms == 0 || now < synced.asked_at_ms ? 0 : now - synced.asked_at_ms;
}

// ---- Training side ---------------------------------------------------------------------------

// Encoded batches a training primary offered, by token, until read to the end or abandoned.
class PsServerCore::SyncDesk {
 public:
  uint64_t Put(std::vector<std::byte> bytes) {
    std::lock_guard lock(mu_);
    const Clock::time_point now = Clock::now();
    std::erase_if(batches_, [&](const auto& b) { return now - b.second.last_read > kAbandoned; });
    while (batches_.size() >= kMaxPreparedBatches) batches_.erase(batches_.begin());  // oldest
    const uint64_t token = ++last_token_;
    batches_[token] =
        Batch{std::make_shared<const std::vector<std::byte>>(std::move(bytes)), 0, now};
    return token;
  }

  void Chunk(rpc::ServerCall call) {
    uint64_t token = 0, offset = 0;
    if (!GetU64s(Bytes(call.request()), {&token, &offset})) {
      return call.Fail(InvalidArgument("ps.SyncChunk: malformed request"));
    }
    std::shared_ptr<const std::vector<std::byte>> bytes;
    {
      std::lock_guard lock(mu_);
      if (auto it = batches_.find(token); it != batches_.end()) {
        bytes = it->second.bytes;
        it->second.last_read = Clock::now();
      }
    }
    if (!bytes) return call.Fail(NotFound("ps.SyncChunk: no such sync batch"));
    const size_t sent = RespondWithChunk(std::move(call), *bytes, offset);
    std::lock_guard lock(mu_);
    auto it = batches_.find(token);
    if (sent == 0 || it == batches_.end()) return;
    // Counted, not judged by the offset: the reader asks for pieces ahead, answered in any order.
    it->second.served += sent;
    if (it->second.served >= it->second.bytes->size()) batches_.erase(it);
  }

 private:
  struct Batch {
    std::shared_ptr<const std::vector<std::byte>> bytes;
    uint64_t served = 0;
    Clock::time_point last_read;
  };
  std::mutex mu_;
  uint64_t last_token_ = 0;
  std::map<uint64_t, Batch> batches_;
};

std::shared_ptr<PsServerCore::SyncDesk> PsServerCore::NewSyncDesk() {
  return std::make_shared<SyncDesk>();
}

void PsServerCore::OnSyncDelta(rpc::ServerCall call) {
  ShardReplica::Position since;
  if (!GetU64s(Bytes(call.request()), {&since.epoch, &since.lsn})) {
    return call.Fail(InvalidArgument("ps.SyncDelta: malformed request"));
  }
  if (replica_.follower()) {
    return call.Fail(FailedPrecondition("ps.SyncDelta: this replica follows another cluster"));
  }
  if (!replica_.PrimaryWithLease()) {
    return call.Fail(FailedPrecondition("ps.SyncDelta: not the primary"));
  }
  // Copied while pushes wait (memory speed), encoded after they resume.
  Result<SyncBatch> batch = replica_.ChangesSince(since);
  if (!batch.ok()) return call.Fail(batch.status());
  std::vector<std::byte> bytes(SyncBatchSize(*batch));
  if (Status s = EncodeSyncBatch(*batch, bytes); !s.ok()) return call.Fail(s);
  const uint64_t size = bytes.size();
  const uint64_t token = sync_desk_->Put(std::move(bytes));
  Result<rpc::Message> reply =
      U64Message({token, batch->source_epoch, batch->source_lsn, uint64_t{size}});
  if (!reply.ok()) return call.Fail(reply.status());
  call.Respond(std::move(reply).value());
}

void PsServerCore::OnSyncChunk(rpc::ServerCall call) {
  sync_desk_->Chunk(std::move(call));
}

// ---- Serving side ----------------------------------------------------------------------------

class ServingSyncCore {
 public:
  ServingSyncCore(PsServerCore* server, ServingSyncOptions options)
      : server_(server), options_(std::move(options)) {}
  ~ServingSyncCore() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Status Init() {
    const ClusterSpec& training = options_.training;
    // Rows move shard to shard, so the clusters must shard alike (ShardOfKey depends on the
    // count): re-sharding a serving cluster goes through a checkpoint instead.
    if (options_.shard_count != training.shards.size() || options_.shard >= options_.shard_count) {
      return InvalidArgument(
          "serving sync: the serving cluster has " + std::to_string(options_.shard_count) +
          " shards and the training cluster " + std::to_string(training.shards.size()) +
          "; a serving cluster follows one of the same shard count");
    }
    if (options_.every <= std::chrono::milliseconds::zero()) {
      return InvalidArgument("serving sync: the interval must be positive");
    }
    if (!server_->replica().follower()) {
      return InvalidArgument(
          "serving sync: the server was not created as a follower "
          "(PsServerOptions::follower)");
    }
    std::map<uint32_t, const TableConfig*> by_id;
    for (const TableConfig& t : training.tables) by_id[t.id] = &t;
    Status mismatch;
    server_->replica().ForEachTable([&](const Table& table) {
      const TableConfig& mine = table.config();
      auto it = by_id.find(mine.id);
      if (!mismatch.ok()) return;
      if (it == by_id.end()) {
        mismatch = InvalidArgument("serving sync: table " + std::to_string(mine.id) +
                                   " is not in the training cluster file");
      } else if (it->second->dim != mine.dim || it->second->kind != mine.kind ||
                 it->second->optimizer.kind != mine.optimizer.kind) {
        mismatch = InvalidArgument("serving sync: table " + std::to_string(mine.id) +
                                   " differs from the training cluster's (dim, kind or "
                                   "optimiser): rows are copied whole");
      }
    });
    BX_RETURN_IF_ERROR(mismatch);
    rpc::ClientOptions client = options_.client;
    if (client.transport.auth_secret.empty()) client.transport.auth_secret = training.secret;
    if (client.transport.privileged_secret.empty()) {
      client.transport.privileged_secret = training.replica_secret;
    }
    for (const ReplicaSpec& r : training.shards[options_.shard].replicas) {
      rpc::ReplicaAddress address{training.transport == "tcp" ? "" : r.rdma, r.tcp};
      BX_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Client> c, rpc::Client::Create({address}, client));
      clients_.push_back(std::move(c));
    }
    std::random_device random;
    key_ = (uint64_t{random()} << 32) | random();
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }

  ServingSyncStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  void Run() {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        if (cv_.wait_for(lock, options_.every, [this] { return stop_; })) return;
      }
      if (!server_->replica().PrimaryWithLease()) continue;
      const Clock::time_point start = Clock::now();
      Result<uint64_t> bytes = SyncOnce();
      std::lock_guard lock(mu_);
      if (!bytes.ok()) {
        ++stats_.failures;
        Log("serving sync of shard " + std::to_string(options_.shard) +
            " failed: " + bytes.status().ToString());
        continue;
      }
      stats_.syncs++;
      stats_.bytes += *bytes;
      stats_.last_bytes = *bytes;
      stats_.last_duration =
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    }
  }

  // One round: ask, move, apply. The batch's bytes, or why nothing was applied.
  Result<uint64_t> SyncOnce() {
    ShardReplica& replica = server_->replica();
    const ShardState::Synced at = replica.synced();
    const uint64_t asked_at_ms = UnixMillis();
    const Clock::time_point start = Clock::now();
    Status last = Unavailable("no training replica answered");
    for (size_t turn = 0; turn < clients_.size(); ++turn) {
      const size_t r = (primary_ + turn) % clients_.size();
      BX_ASSIGN_OR_RETURN(rpc::Message request, U64Message({at.epoch, at.lsn}));
      Result<rpc::Message> offer =
          CallOnce(*clients_[r], kSyncDeltaMethod, std::move(request), options_.timeout);
      if (!offer.ok()) {
        last = offer.status();
        continue;
      }
      primary_ = r;
      uint64_t token = 0, epoch = 0, lsn = 0, size = 0;
      if (!GetU64s(Bytes(*offer), {&token, &epoch, &lsn, &size})) {
        return DataLoss("ps.SyncDelta: malformed reply");
      }
      std::vector<std::byte> bytes;
      bytes.reserve(std::min<uint64_t>(size, uint64_t{64} << 20));
      BX_RETURN_IF_ERROR(ReadChunks(*clients_[r], kSyncChunkMethod, token, size, options_.timeout,
                                    [&](std::span<const std::byte> chunk) {
                                      bytes.insert(bytes.end(), chunk.begin(), chunk.end());
                                      return Status::Ok();
                                    }));
      const auto moved = Clock::now() - start;
      BX_ASSIGN_OR_RETURN(SyncBatch batch, DecodeSyncBatch(bytes));
      if (batch.source_epoch != epoch || batch.source_lsn != lsn) {
        return DataLoss("ps.SyncDelta: the batch's position differs from the offer");
      }
      batch.asked_at_ms = asked_at_ms;
      const bool full = batch.full;
      BX_RETURN_IF_ERROR(Apply(std::move(batch)));
      if (full) {
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        const double moved_s = std::chrono::duration<double>(moved).count();
        char line[256];
        std::snprintf(line, sizeof line,
                      "serving sync of shard %u: full copy at epoch %llu lsn %llu, %.1f MiB, "
                      "moved in %.3f s (%.1f MiB/s), applied in %.3f s",
                      options_.shard, (unsigned long long)epoch, (unsigned long long)lsn,
                      size / 1048576.0, moved_s, size / 1048576.0 / std::max(moved_s, 1e-6),
                      seconds - moved_s);
        Log(line);
        std::lock_guard lock(mu_);
        stats_.full_copies++;
      }
      return size;
    }
    return last;
  }

  // Applies `batch` as one record of this shard's replication stream (a push of this
  // follower's own session), acknowledged once durable on the serving backups.
  Status Apply(SyncBatch batch) {
    PushRequest push;
    if (session_ == 0 || sequence_ >= kSessionPushes) {
      // A new session: generation = now in seconds (upper 32 bits), as a client's.
      const uint64_t now_s = UnixMillis() / 1000;
      std::random_device random;
      session_ = (now_s << 32) | random();
      sequence_ = 0;
    }
    push.id = PushId{session_, ++sequence_};
    push.client_key = key_;
    push.dim = 1;
    push.sync = std::make_shared<const SyncBatch>(std::move(batch));
    auto promise = std::make_shared<std::promise<Result<PushAck>>>();
    std::future<Result<PushAck>> ack = promise->get_future();
    server_->replica().HandlePush(
        std::move(push), [promise](Result<PushAck> a) { promise->set_value(std::move(a)); });
    if (ack.wait_for(options_.timeout) != std::future_status::ready) {
      session_ = 0;  // its fate is open: the next round starts a new session
      return DeadlineExceeded("the sync record was not durable in time");
    }
    Result<PushAck> result = ack.get();
    if (!result.ok()) {
      session_ = 0;
      return result.status();
    }
    if (result->session_expired) {
      session_ = 0;
      return Unavailable("the sync session expired; next round");
    }
    return Status::Ok();
  }

  void Log(const std::string& line) const {
    if (options_.log) {
      options_.log(line);
    } else {
      bx::Log(LogLevel::kInfo, line);  // the process's log sink
    }
  }

  // A session is renewed now and then so its dedup window never fills.
  static constexpr uint64_t kSessionPushes = 1024;

  PsServerCore* const server_;
  const ServingSyncOptions options_;
  std::vector<std::unique_ptr<rpc::Client>> clients_;
  size_t primary_ = 0;  // the training replica that answered last (follower thread)
  uint64_t session_ = 0, sequence_ = 0, key_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  ServingSyncStats stats_;  // mu_
  std::thread thread_;
};

Result<std::unique_ptr<ServingSync>> ServingSync::Start(PsServer* server,
                                                        ServingSyncOptions options) {
  if (server == nullptr) return InvalidArgument("ServingSync::Start: no server");
  auto core = std::make_unique<ServingSyncCore>(&PsInternals::Core(*server), std::move(options));
  BX_RETURN_IF_ERROR(core->Init());
  return std::unique_ptr<ServingSync>(new ServingSync(std::move(core)));
}

ServingSync::ServingSync(std::unique_ptr<ServingSyncCore> core) : core_(std::move(core)) {}
ServingSync::~ServingSync() = default;

ServingSyncStats ServingSync::stats() const {
  return core_->stats();
}

}  // namespace bx::ps
