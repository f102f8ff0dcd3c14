// Catch-up on the network (docs/PS.md "Catch-up"): the "ps.Join*" methods a primary serves
// through its JoinService, and the joiner's side of them, CatchUpFrom.
#include <algorithm>
#include <deque>
#include <future>
#include <thread>
#include <utility>

#include "base/wire_encoding.h"
#include "ps/service/ps_service.h"

namespace bx::ps {
namespace {

using Clock = std::chrono::steady_clock;
// Per call of a catch-up: a snapshot chunk is 1 MiB.
constexpr std::chrono::milliseconds kJoinTimeout{5000};

constexpr size_t kMaxIncarnationBytes = 256;

}  // namespace

bool GetU64s(std::span<const std::byte> bytes, std::initializer_list<uint64_t*> out) {
  if (bytes.size() != out.size() * sizeof(uint64_t)) return false;
  WireReader r(bytes);
  for (uint64_t* v : out) r.GetU64(v);
  return true;
}

Result<rpc::Message> U64Message(std::initializer_list<uint64_t> values) {
  BX_ASSIGN_OR_RETURN(rpc::Message m, rpc::Message::Allocate(values.size() * sizeof(uint64_t)));
  WireWriter w(std::span<std::byte>(m.data(), m.size()));
  for (uint64_t v : values) w.PutU64(v);
  return m;
}

void PsServerCore::SetJoinService(std::shared_ptr<JoinService> service) {
  join_service_.Store(std::move(service));
}

void PsServerCore::OnJoin(rpc::ServerCall call) {
  std::shared_ptr<JoinService> service = join_service_.Load();
  if (!service) return call.Fail(FailedPrecondition("this server takes no joins"));
  const bool v2 = call.method() == kJoinV2Method;
  WireReader r(Bytes(call.request()));
  uint32_t replica = 0, n = 0;
  if (!r.GetU32(&replica) || !r.GetU32(&n) || n > kMaxIncarnationBytes ||
      n + (v2 ? sizeof(uint32_t) : 0) != r.remaining()) {
    return call.Fail(InvalidArgument(call.method() + ": malformed request"));
  }
  std::string incarnation(n, '\0');
  r.GetBytes(incarnation.data(), n);
  uint32_t reads = kJoinSnapshotVersion;  // what every ps.Join caller reads
  if (v2) r.GetU32(&reads);
  // A joiner that reads versions beyond ours gets our newest.
  const uint32_t version = std::min<uint32_t>(reads, ShardState::kSnapshotVersions.newest);
  Result<JoinOffer> offer = service->Begin(replica, incarnation, version);
  if (!offer.ok()) return call.Fail(offer.status());
  Result<rpc::Message> reply =
      U64Message({offer->token, offer->position.epoch, offer->position.lsn, offer->bytes});
  if (!reply.ok()) return call.Fail(reply.status());
  call.Respond(std::move(reply).value());
}

void PsServerCore::OnJoinChunk(rpc::ServerCall call) {
  std::shared_ptr<JoinService> service = join_service_.Load();
  if (!service) return call.Fail(FailedPrecondition("this server takes no joins"));
  uint64_t token = 0, offset = 0;
  if (!GetU64s(Bytes(call.request()), {&token, &offset})) {
    return call.Fail(InvalidArgument("ps.JoinChunk: malformed request"));
  }
  Result<std::shared_ptr<const std::vector<std::byte>>> snapshot = service->Snapshot(token);
  if (!snapshot.ok()) return call.Fail(snapshot.status());
  RespondWithChunk(std::move(call), **snapshot, offset);
}

size_t RespondWithChunk(rpc::ServerCall call, std::span<const std::byte> bytes, uint64_t offset) {
  if (offset >= bytes.size()) {
    call.Fail(InvalidArgument(call.method() + ": offset past the end"));
    return 0;
  }
  const size_t n = std::min<uint64_t>(kJoinChunkBytes, bytes.size() - offset);
  Result<rpc::Message> reply = rpc::Message::Allocate(n);
  if (!reply.ok()) {
    call.Fail(reply.status());
    return 0;
  }
  std::copy_n(bytes.data() + offset, n, reply->data());
  call.Respond(std::move(reply).value());
  return n;
}

Status ReadChunks(rpc::Client& client, std::string_view method, uint64_t token, uint64_t size,
                  std::chrono::milliseconds timeout,
                  const std::function<Status(std::span<const std::byte>)>& sink) {
  // Several chunks requested ahead: one round trip per MiB at a time, each waiting behind the
  // trainers' pushes at a busy primary, moved a 200 MB snapshot at 33 MB/s.
  const rpc::CallOptions chunk_options{.timeout = timeout, .idempotent = true, .max_attempts = 1};
  std::deque<std::future<Result<rpc::Message>>> ahead;
  uint64_t requested = 0, received = 0;
  while (received < size) {
    while (ahead.size() < kJoinChunksAhead && requested < size) {
      BX_ASSIGN_OR_RETURN(rpc::Message chunk_request, U64Message({token, requested}));
      ahead.push_back(client.Call(method, std::move(chunk_request), chunk_options));
      requested += std::min<uint64_t>(kJoinChunkBytes, size - requested);
    }
    Result<rpc::Message> chunk = ahead.front().get();
    ahead.pop_front();
    if (!chunk.ok()) return chunk.status().WithContext(std::string(method));
    if (chunk->size() != std::min<uint64_t>(kJoinChunkBytes, size - received)) {
      return DataLoss(std::string(method) + ": chunk does not fit the snapshot");
    }
    BX_RETURN_IF_ERROR(sink(Bytes(*chunk)));
    received += chunk->size();
  }
  return Status::Ok();
}

void PsServerCore::OnJoinAttach(rpc::ServerCall call) {
  std::shared_ptr<JoinService> service = join_service_.Load();
  if (!service) return call.Fail(FailedPrecondition("this server takes no joins"));
  uint64_t token = 0;
  if (!GetU64s(Bytes(call.request()), {&token})) {
    return call.Fail(InvalidArgument("ps.JoinAttach: malformed request"));
  }
  if (Status s = service->Attach(token); !s.ok()) return call.Fail(s);
  Result<rpc::Message> reply = rpc::Message::Allocate(0);
  if (!reply.ok()) return call.Fail(reply.status());
  call.Respond(std::move(reply).value());
}

Result<CatchUpResult> CatchUpFrom(const rpc::ReplicaAddress& primary,
                                  const rpc::ClientOptions& options, uint32_t self,
                                  const std::string& incarnation, ShardReplica& replica,
                                  std::chrono::milliseconds timeout) {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Client> client, rpc::Client::Create({primary}, options));

  // ps.Join.v2 says which snapshot versions we read; a primary of an older build serves only
  // ps.Join (and writes a version we read: we read every older one).
  auto join_request = [&](bool v2) -> Result<rpc::Message> {
    BX_ASSIGN_OR_RETURN(
        rpc::Message request,
        rpc::Message::Allocate((v2 ? 3 : 2) * sizeof(uint32_t) + incarnation.size()));
    WireWriter w(std::span<std::byte>(request.data(), request.size()));
    w.PutU32(self);
    w.PutU32(static_cast<uint32_t>(incarnation.size()));
    w.PutBytes(incarnation.data(), incarnation.size());
    if (v2) w.PutU32(ShardState::kSnapshotVersions.newest);
    return request;
  };
  CatchUpResult result;
  auto lap = [start = Clock::now()]() mutable {
    const Clock::time_point now = Clock::now();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
    start = now;
    return ms;
  };
  BX_ASSIGN_OR_RETURN(rpc::Message request, join_request(true));
  Result<rpc::Message> reply = CallOnce(*client, kJoinV2Method, std::move(request), timeout);
  if (!reply.ok() && reply.status().code() == StatusCode::kNotFound &&
      reply.status().message().find("is not served") != std::string::npos) {
    BX_ASSIGN_OR_RETURN(request, join_request(false));
    reply = CallOnce(*client, kJoinMethod, std::move(request), timeout);
  }
  result.offer_time = lap();
  if (!reply.ok()) return reply.status().WithContext("ps.Join");
  uint64_t token = 0, size = 0;
  ShardReplica::Position at;
  if (!GetU64s(Bytes(*reply), {&token, &at.epoch, &at.lsn, &size})) {
    return DataLoss("ps.Join: malformed reply");
  }
  std::vector<std::byte> snapshot;  // grows with what arrives, not with what the reply claims
  snapshot.reserve(std::min<uint64_t>(size, uint64_t{64} << 20));
  BX_RETURN_IF_ERROR(ReadChunks(*client, kJoinChunkMethod, token, size, timeout, [&](auto chunk) {
    snapshot.insert(snapshot.end(), chunk.begin(), chunk.end());
    return Status::Ok();
  }));
  result.transfer_time = lap();
  BX_RETURN_IF_ERROR(replica.InstallSnapshot(snapshot));
  if (replica.position() != at) return DataLoss("snapshot's position differs from the offer");
  result.install_time = lap();

  BX_ASSIGN_OR_RETURN(rpc::Message attach, U64Message({token}));
  reply = CallOnce(*client, kJoinAttachMethod, std::move(attach), timeout);
  if (!reply.ok()) {
    replica.StepDown("attach to the primary failed");
    return reply.status().WithContext("ps.JoinAttach");
  }
  result.position = at;
  result.bytes = size;
  return result;
}

// ---- LeasedFailoverCore's catch-up ----------------------------------------------------------

class LeasedFailoverCore::JoinDesk : public JoinService {
 public:
  explicit JoinDesk(LeasedFailoverCore* core) : core_(core) {}
  ~JoinDesk() override { Close(); }

  void Close() {
    std::thread preparing;
    {
      std::lock_guard lock(mu_);
      core_ = nullptr;
      pending_.clear();
      preparing = std::move(preparing_);
    }
    if (preparing.joinable()) preparing.join();
  }

  Result<JoinOffer> Begin(uint32_t replica, const std::string& incarnation,
                          uint32_t snapshot_version) override {
    std::lock_guard lock(mu_);
    if (core_ == nullptr) return Unavailable("failover monitor stopped");
    BX_RETURN_IF_ERROR(core_->CheckJoiner(replica, incarnation));
    if (auto it = pending_.find(replica); it != pending_.end() &&
                                          it->second.incarnation == incarnation &&
                                          it->second.snapshot_version == snapshot_version) {
      const Pending& p = it->second;
      if (p.bytes) return JoinOffer{p.token, p.position, p.bytes->size()};
      if (!p.failure.ok()) {
        Status failure = p.failure;
        pending_.erase(it);  // the next ask starts again
        return failure;
      }
      return Unavailable("preparing the snapshot for replica " + std::to_string(replica) +
                         "; ask again");
    }
    // One snapshot at a time: each copies the shard while pushes wait.
    if (preparing_busy_) return Unavailable("preparing a snapshot for another replica");
    if (preparing_.joinable()) preparing_.join();  // finished: its result is in pending_
    Pending& p = pending_[replica];  // replaces an earlier attempt of the same replica
    p = Pending{
        .token = ++last_token_, .incarnation = incarnation, .snapshot_version = snapshot_version};
    preparing_busy_ = true;
    preparing_ = std::thread([this, replica, token = p.token, snapshot_version] {
      Prepare(replica, token, snapshot_version);
    });
    return Unavailable("preparing the snapshot for replica " + std::to_string(replica) +
                       "; ask again");
  }

  Result<std::shared_ptr<const std::vector<std::byte>>> Snapshot(uint64_t token) override {
    std::lock_guard lock(mu_);
    if (auto it = FindLocked(token); it != pending_.end() && it->second.bytes) {
      return it->second.bytes;
    }
    return NotFound("no snapshot " + std::to_string(token) + " (replaced, attached or expired)");
  }

  Status Attach(uint64_t token) override {
    std::lock_guard lock(mu_);
    if (core_ == nullptr) return Unavailable("failover monitor stopped");
    auto it = FindLocked(token);
    if (it == pending_.end() || !it->second.bytes) {
      return NotFound("no snapshot " + std::to_string(token));
    }
    const uint32_t replica = it->first;
    const ShardMember member{replica, it->second.incarnation};
    pending_.erase(it);
    BX_ASSIGN_OR_RETURN(std::shared_ptr<BackupLink> link,
                        core_->server_->LinkTo(core_->options_.replicas[replica]));
    auto add = [inbox = core_->inbox_, member](size_t index, std::function<void(Status)> done) {
      inbox->Submit(Change{true, member, index, std::move(done)});
    };
    BX_RETURN_IF_ERROR(core_->server_->replica().AttachLearner(replica, link, std::move(add)));
    core_->Log("replica " + std::to_string(replica) + " attached; catching up");
    return Status::Ok();
  }

 private:
  struct Pending {
    uint64_t token = 0;
    std::string incarnation;
    uint32_t snapshot_version = 0;
    ShardReplica::Position position;
    std::shared_ptr<const std::vector<std::byte>> bytes;  // null while preparing
    Status failure;
  };

  // The preparing thread: takes the snapshot (the copy under the replica's order lock, the
  // encoding beside the pushes) and files it under `token` if that is still wanted.
  void Prepare(uint32_t replica, uint64_t token, uint32_t snapshot_version) {
    ShardReplica* shard;
    {
      std::lock_guard lock(mu_);
      if (core_ == nullptr) return;
      shard = &core_->server_->replica();
    }
    Result<ShardReplica::JoinSnapshot> snapshot = shard->SnapshotForJoin(replica, snapshot_version);
    std::lock_guard lock(mu_);
    preparing_busy_ = false;
    auto it = FindLocked(token);
    if (core_ == nullptr || it == pending_.end()) return;  // closed, or replaced
    if (!snapshot.ok()) {
      it->second.failure = snapshot.status();
      return;
    }
    it->second.position = snapshot->position;
    it->second.bytes = std::make_shared<const std::vector<std::byte>>(std::move(snapshot->bytes));
    core_->Log("snapshot for replica " + std::to_string(replica) + " at epoch " +
               std::to_string(snapshot->position.epoch) + " lsn " +
               std::to_string(snapshot->position.lsn) + " (" +
               std::to_string(it->second.bytes->size()) + " bytes) in format " +
               std::to_string(snapshot_version));
  }

  std::map<uint32_t, Pending>::iterator FindLocked(uint64_t token) {
    return std::find_if(pending_.begin(), pending_.end(),
                        [&](const auto& entry) { return entry.second.token == token; });
  }
  std::mutex mu_;
  LeasedFailoverCore* core_;             // null once closed
  std::map<uint32_t, Pending> pending_;  // at most one per replica
  uint64_t last_token_ = 0;
  std::thread preparing_;  // the last snapshot's preparation (joined before the next, or Close)
  bool preparing_busy_ = false;
};

void LeasedFailoverCore::OpenJoinDesk() {
  desk_ = std::make_shared<JoinDesk>(this);
  server_->SetJoinService(desk_);
}

void LeasedFailoverCore::CloseJoinDesk() {
  if (!desk_) return;
  server_->SetJoinService(nullptr);
  desk_->Close();
}

Status LeasedFailoverCore::CheckJoiner(uint32_t replica, const std::string& incarnation) {
  const uint32_t n = static_cast<uint32_t>(options_.replicas.size());
  if (replica >= n || replica == options_.self) {
    return InvalidArgument("replica " + std::to_string(replica) + " cannot join this shard");
  }
  std::optional<VersionedConfig> office = coordinator_->office();
  if (!office || !server_->replica().PrimaryWithLease()) {
    return FailedPrecondition("not the primary of the shard");
  }
  BX_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> registered,
                      coordinator_->Registered(n));
  if (registered[replica] != incarnation) {
    return FailedPrecondition("replica " + std::to_string(replica) +
                              " is registered by another process");
  }
  if (const ShardMember* m = office->config.Find(replica)) {
    if (m->incarnation == incarnation) return FailedPrecondition("already in the set");
    // Its earlier process is gone (another registered): remove it first, by a committed
    // change, so the set never names two processes for one replica.
    if (std::optional<size_t> link = inbox_->LinkOf(replica)) {
      server_->replica().ReportBackupFailed(*link);
    }
    return Unavailable("replica " + std::to_string(replica) +
                       "'s earlier process is still in the set; removing it first");
  }
  return Status::Ok();
}

void LeasedFailoverCore::CatchUp(const VersionedConfig& current) {
  const Clock::time_point now = Clock::now();
  // Attached and waiting to be added: the primary adds a learner once it holds every push
  // acknowledged so far. While its position moves it is catching up (a large backlog under
  // load takes a while); one that has not moved for a few leases was dropped, and starts again.
  // So does one taken out of service meanwhile: it refuses forwards, and the primary drops a
  // learner whose forward fails.
  if (attached_at_ && attached_epoch_ == current.config.epoch) {
    const ShardReplica::Position position = server_->replica().position();
    const ShardReplica::Role role = server_->replica().role();
    if (role == ShardReplica::Role::kFenced) {
      Log("attached, then taken out of service: catching up again");
    } else {
      if (position != attached_position_ && role == ShardReplica::Role::kBackup) {
        attached_position_ = position;
        attached_at_ = now;
      }
      if (now - *attached_at_ < 4 * options_.lease_ttl) return;
      Log("attached, but no push forwarded for " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(now - *attached_at_).count()) +
          " ms at lsn " + std::to_string(attached_position_.lsn) + ": catching up again");
    }
  }
  attached_at_.reset();
  if (server_->replica().role() != ShardReplica::Role::kFenced) {
    Log("not in the shard's set of epoch " + std::to_string(current.config.epoch) +
        ": serving nothing until caught up from the primary");
    server_->replica().StepDown("not in the shard's replica set");
  }
  Result<bool> alive = coordinator_->PrimaryLeaseAlive();
  if (!alive.ok() || !*alive) return LogOnce("waiting for a primary to catch up from");
  const uint32_t primary = current.config.primary;
  Result<CatchUpResult> caught =
      CatchUpFrom(options_.replicas[primary], options_.client, static_cast<uint32_t>(options_.self),
                  coordinator_->incarnation(), server_->replica(), kJoinTimeout);
  if (!caught.ok()) {
    server_->replica().StepDown("catch-up failed");
    return LogOnce("catch-up from replica " + std::to_string(primary) +
                   " failed: " + caught.status().ToString());
  }
  attached_at_ = Clock::now();  // the transfer took a while: the wait starts now
  attached_epoch_ = current.config.epoch;
  attached_position_ = server_->replica().position();
  Log("installed a snapshot from replica " + std::to_string(primary) + " at epoch " +
      std::to_string(caught->position.epoch) + " lsn " + std::to_string(caught->position.lsn) +
      " (" + std::to_string(caught->bytes) + " bytes; offered in " +
      std::to_string(caught->offer_time.count()) + " ms, moved in " +
      std::to_string(caught->transfer_time.count()) + " ms, installed in " +
      std::to_string(caught->install_time.count()) + " ms); attached, waiting to be added");
}

}  // namespace bx::ps
