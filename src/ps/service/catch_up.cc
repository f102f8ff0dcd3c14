// Catch-up on the network (docs/PS.md "Catch-up"): the "ps.Join*" methods a primary serves
// through its JoinService, and the joiner's side of them, CatchUpFrom.
#include <algorithm>
#include <utility>

#include "base/wire_encoding.h"
#include "ps/service/ps_service.h"

namespace bx::ps {
namespace {

using Clock = std::chrono::steady_clock;
// Per call of a catch-up: a snapshot chunk is 1 MiB.
constexpr std::chrono::milliseconds kJoinTimeout{5000};

constexpr size_t kMaxIncarnationBytes = 256;

// Decodes a body of exactly out.size() u64s (JoinChunk, JoinAttach, the Join reply).
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

}  // namespace

void PsServerCore::SetJoinService(std::shared_ptr<JoinService> service) {
  join_service_.store(std::move(service));
}

void PsServerCore::OnJoin(rpc::ServerCall call) {
  std::shared_ptr<JoinService> service = join_service_.load();
  if (!service) return call.Fail(FailedPrecondition("this server takes no joins"));
  WireReader r(Bytes(call.request()));
  uint32_t replica = 0, n = 0;
  if (!r.GetU32(&replica) || !r.GetU32(&n) || n > kMaxIncarnationBytes || n != r.remaining()) {
    return call.Fail(InvalidArgument("ps.Join: malformed request"));
  }
  std::string incarnation(n, '\0');
  r.GetBytes(incarnation.data(), n);
  Result<JoinOffer> offer = service->Begin(replica, incarnation);
  if (!offer.ok()) return call.Fail(offer.status());
  Result<rpc::Message> reply =
      U64Message({offer->token, offer->position.epoch, offer->position.lsn, offer->bytes});
  if (!reply.ok()) return call.Fail(reply.status());
  call.Respond(std::move(reply).value());
}

void PsServerCore::OnJoinChunk(rpc::ServerCall call) {
  std::shared_ptr<JoinService> service = join_service_.load();
  if (!service) return call.Fail(FailedPrecondition("this server takes no joins"));
  uint64_t token = 0, offset = 0;
  if (!GetU64s(Bytes(call.request()), {&token, &offset})) {
    return call.Fail(InvalidArgument("ps.JoinChunk: malformed request"));
  }
  Result<std::shared_ptr<const std::vector<std::byte>>> snapshot = service->Snapshot(token);
  if (!snapshot.ok()) return call.Fail(snapshot.status());
  const std::vector<std::byte>& bytes = **snapshot;
  if (offset >= bytes.size())
    return call.Fail(InvalidArgument("ps.JoinChunk: offset past the end"));
  const size_t n = std::min<uint64_t>(kJoinChunkBytes, bytes.size() - offset);
  Result<rpc::Message> reply = rpc::Message::Allocate(n);
  if (!reply.ok()) return call.Fail(reply.status());
  std::copy_n(bytes.data() + offset, n, reply->data());
  call.Respond(std::move(reply).value());
}

void PsServerCore::OnJoinAttach(rpc::ServerCall call) {
  std::shared_ptr<JoinService> service = join_service_.load();
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

  BX_ASSIGN_OR_RETURN(rpc::Message request,
                      rpc::Message::Allocate(2 * sizeof(uint32_t) + incarnation.size()));
  WireWriter w(std::span<std::byte>(request.data(), request.size()));
  w.PutU32(self);
  w.PutU32(static_cast<uint32_t>(incarnation.size()));
  w.PutBytes(incarnation.data(), incarnation.size());
  Result<rpc::Message> reply = CallOnce(*client, kJoinMethod, std::move(request), timeout);
  if (!reply.ok()) return reply.status().WithContext("ps.Join");
  uint64_t token = 0, size = 0;
  ShardReplica::Position at;
  if (!GetU64s(Bytes(*reply), {&token, &at.epoch, &at.lsn, &size})) {
    return DataLoss("ps.Join: malformed reply");
  }
  std::vector<std::byte> snapshot;  // grows with what arrives, not with what the reply claims
  snapshot.reserve(std::min<uint64_t>(size, uint64_t{64} << 20));
  while (snapshot.size() < size) {
    BX_ASSIGN_OR_RETURN(rpc::Message chunk_request, U64Message({token, snapshot.size()}));
    Result<rpc::Message> chunk =
        CallOnce(*client, kJoinChunkMethod, std::move(chunk_request), timeout);
    if (!chunk.ok()) return chunk.status().WithContext("ps.JoinChunk");
    if (chunk->size() == 0 || chunk->size() > size - snapshot.size()) {
      return DataLoss("ps.JoinChunk: chunk does not fit the snapshot");
    }
    snapshot.insert(snapshot.end(), chunk->data(), chunk->data() + chunk->size());
  }
  BX_RETURN_IF_ERROR(replica.InstallSnapshot(snapshot));
  if (replica.position() != at) return DataLoss("snapshot's position differs from the offer");

  BX_ASSIGN_OR_RETURN(rpc::Message attach, U64Message({token}));
  reply = CallOnce(*client, kJoinAttachMethod, std::move(attach), timeout);
  if (!reply.ok()) {
    replica.StepDown("attach to the primary failed");
    return reply.status().WithContext("ps.JoinAttach");
  }
  return CatchUpResult{at, size};
}

// ---- LeasedFailoverCore's catch-up ----------------------------------------------------------

class LeasedFailoverCore::JoinDesk : public JoinService {
 public:
  explicit JoinDesk(LeasedFailoverCore* core) : core_(core) {}

  void Close() {
    std::lock_guard lock(mu_);
    core_ = nullptr;
    pending_.clear();
  }

  Result<JoinOffer> Begin(uint32_t replica, const std::string& incarnation) override {
    std::lock_guard lock(mu_);  // one join at a time: each snapshot stalls pushes a little
    if (core_ == nullptr) return Unavailable("failover monitor stopped");
    BX_RETURN_IF_ERROR(core_->CheckJoiner(replica, incarnation));
    BX_ASSIGN_OR_RETURN(ShardReplica::JoinSnapshot snapshot,
                        core_->server_->replica().SnapshotForJoin(replica));
    const ShardReplica::Position at = snapshot.position;
    Pending& p = pending_[replica];  // replaces an earlier attempt of the same replica
    p.token = ++last_token_;
    p.incarnation = incarnation;
    p.bytes = std::make_shared<const std::vector<std::byte>>(std::move(snapshot.bytes));
    core_->Log("snapshot for replica " + std::to_string(replica) + " at epoch " +
               std::to_string(at.epoch) + " lsn " + std::to_string(at.lsn) + " (" +
               std::to_string(p.bytes->size()) + " bytes)");
    return JoinOffer{p.token, at, p.bytes->size()};
  }

  Result<std::shared_ptr<const std::vector<std::byte>>> Snapshot(uint64_t token) override {
    std::lock_guard lock(mu_);
    if (auto it = FindLocked(token); it != pending_.end()) return it->second.bytes;
    return NotFound("no snapshot " + std::to_string(token) + " (replaced, attached or expired)");
  }

  Status Attach(uint64_t token) override {
    std::lock_guard lock(mu_);
    if (core_ == nullptr) return Unavailable("failover monitor stopped");
    auto it = FindLocked(token);
    if (it == pending_.end()) return NotFound("no snapshot " + std::to_string(token));
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
    std::shared_ptr<const std::vector<std::byte>> bytes;
  };
  std::map<uint32_t, Pending>::iterator FindLocked(uint64_t token) {
    return std::find_if(pending_.begin(), pending_.end(),
                        [&](const auto& entry) { return entry.second.token == token; });
  }
  std::mutex mu_;
  LeasedFailoverCore* core_;             // null once closed
  std::map<uint32_t, Pending> pending_;  // at most one per replica
  uint64_t last_token_ = 0;
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
  // Attached and waiting to be added: the primary adds a learner once it caught up, which
  // takes a few round trips; one that has not after a few leases starts again.
  if (attached_at_ && attached_epoch_ == current.config.epoch &&
      now - *attached_at_ < 4 * options_.lease_ttl) {
    return;
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
  attached_at_ = now;
  attached_epoch_ = current.config.epoch;
  Log("installed a snapshot from replica " + std::to_string(primary) + " at epoch " +
      std::to_string(caught->position.epoch) + " lsn " + std::to_string(caught->position.lsn) +
      " (" + std::to_string(caught->bytes) + " bytes); attached, waiting to be added");
}

}  // namespace bx::ps
