#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "base/transfer_time.h"
#include "ps/service/ps_service.h"

namespace bx::ps {

void RpcBackupLink::Forward(uint64_t epoch, uint64_t lsn, const PushRequest& push,
                            std::function<void(Status)> done) {
  const uint64_t bytes = ForwardSize(push);
  Result<rpc::Message> message = rpc::Message::Allocate(bytes);
  if (!message.ok()) return done(message.status());
  if (Status s = EncodeForward(epoch, lsn, push, {message->data(), message->size()}); !s.ok()) {
    return done(s);
  }
  const uint64_t ahead_and_this = in_flight_->bytes.fetch_add(bytes) + bytes;
  const uint64_t ahead = in_flight_->count.fetch_add(1);
  const std::chrono::microseconds timeout = timeout_ +
                                            TransferTime(ahead_and_this, bytes_per_second_) +
                                            kForwardAllowance * static_cast<int64_t>(ahead);
  client_->Call(
      kForwardMethod, std::move(message).value(),
      rpc::CallOptions{.timeout = timeout, .idempotent = true},
      [done = std::move(done), in_flight = in_flight_, bytes](Result<rpc::Message> reply) {
        in_flight->bytes.fetch_sub(bytes);
        in_flight->count.fetch_sub(1);
        done(reply.ok() ? Status::Ok() : reply.status());
      });
}

namespace {

// The replica's bounds from the public options (whose defaults are the replica's own: tested).
ShardReplica::Options ReplicaOptionsOf(const PsServerOptions& options) {
  ShardReplica::Options replica;
  replica.max_undurable_pushes = options.max_undurable_pushes;
  replica.max_undurable_bytes = options.max_undurable_bytes;
  replica.max_reordered_forwards = options.max_reordered_forwards;
  replica.dedup.window = options.dedup_window;
  replica.dedup.max_clients = options.max_dedup_clients;
  replica.min_in_sync = options.min_in_sync;
  replica.follower = options.follower;
  replica.sync_visible_whole = options.sync_visible_whole;
  return replica;
}

Status CheckOptions(const PsServerOptions& options) {
  if (!options.replica_secret.empty() &&
      (options.auth_secret.empty() || options.replica_secret == options.auth_secret)) {
    return InvalidArgument(
        "PsServerOptions: replica_secret needs an auth_secret, and must differ from it");
  }
  if (options.max_undurable_pushes == 0 || options.max_undurable_bytes == 0 ||
      options.max_reordered_forwards == 0 || options.dedup_window == 0 ||
      options.max_dedup_clients == 0 || options.min_in_sync == 0) {
    return InvalidArgument(
        "PsServerOptions: max_undurable_pushes, max_undurable_bytes, max_reordered_forwards, "
        "dedup_window, max_dedup_clients and min_in_sync must be at least 1");
  }
  if (options.forward_timeout <= std::chrono::microseconds::zero()) {
    return InvalidArgument("PsServerOptions: forward_timeout must be positive");
  }
  if (!(options.max_abs_gradient >= 0) || !std::isfinite(options.max_abs_gradient)) {
    return InvalidArgument("PsServerOptions: max_abs_gradient must be finite and >= 0");
  }
  return Status::Ok();
}

// The first gradient element a push may not carry: non-finite, or above `limit` (0: none).
Status CheckGradients(const PushRequest& push, float limit) {
  for (size_t i = 0; i < push.gradients.size(); ++i) {
    const float g = push.gradients[i];
    if (std::isfinite(g) && (limit == 0 || std::fabs(g) <= limit)) continue;
    const size_t row = i / push.dim;
    return InvalidArgument("push refused: gradient element " + std::to_string(i % push.dim) +
                           " of key " + std::to_string(push.keys[row]) + " is " +
                           std::to_string(g) +
                           (std::isfinite(g) ? ", above max_abs_gradient " + std::to_string(limit)
                                             : std::string(", not a finite number")));
  }
  return Status::Ok();
}

}  // namespace

PsServerCore::PsServerCore(PsServerOptions options)
    : options_(std::move(options)), replica_(ReplicaOptionsOf(options_)) {}

Result<std::unique_ptr<PsServerCore>> PsServerCore::Create(const std::vector<TableConfig>& tables,
                                                           PsServerOptions options) {
  BX_RETURN_IF_ERROR(CheckOptions(options));
  if (!options.auth_secret.empty()) {
    options.rpc.transport.auth_secret = options.auth_secret;
    options.backup_client.transport.auth_secret = options.auth_secret;
  }
  if (!options.replica_secret.empty()) {
    options.rpc.transport.privileged_secret = options.replica_secret;
    options.backup_client.transport.privileged_secret = options.replica_secret;
  }
  // A backup link found dead drops its backup, as a forward past its deadline does: its silence
  // is judged by the same bound, not by a client's quick failover (500 ms by default), which a
  // backup busy taking in and applying a large push can exceed without being in trouble. So is
  // its connection set-up: a forward's first attempt connects, and a handshake answered after
  // the client's 1 s default (a backup's I/O thread waiting for a core on a loaded host: seen
  // in CI) dropped a backup that would have answered the forward within its bound.
  const auto forward_bound =
      std::chrono::duration_cast<std::chrono::milliseconds>(options.forward_timeout);
  options.backup_client.heartbeat_timeout =
      std::max(options.backup_client.heartbeat_timeout, forward_bound);
  // Heartbeats keep the client default's ratio to that bound (five per timeout), not its 100 ms.
  options.backup_client.heartbeat_interval = std::max(options.backup_client.heartbeat_interval,
                                                      options.backup_client.heartbeat_timeout / 5);
  options.backup_client.connect_timeout =
      std::max(options.backup_client.connect_timeout, forward_bound);
  std::unique_ptr<PsServerCore> server(new PsServerCore(std::move(options)));
  for (const TableConfig& table : tables) BX_RETURN_IF_ERROR(server->replica_.CreateTable(table));
  BX_ASSIGN_OR_RETURN(server->server_, rpc::Server::Create(server->options_.rpc));
  BX_RETURN_IF_ERROR(server->Register());
  return server;
}

PsServerCore::~PsServerCore() {
  Stop();
}

void PsServerCore::Stop() {
  server_->Stop();
  // Backup clients are kept: the replica may still complete forwards through them, and their
  // destruction fails those calls cleanly (Aborted) when this object goes.
}

Status PsServerCore::Register() {
  BX_RETURN_IF_ERROR(server_->AddMethod(
      std::string(kFetchMethod), [this](rpc::ServerCall call) { OnFetch(std::move(call)); }));
  BX_RETURN_IF_ERROR(server_->AddMethod(std::string(kPushMethod),
                                        [this](rpc::ServerCall call) { OnPush(std::move(call)); }));
  // Replica-to-replica methods: with a replica secret, only for callers that proved it.
  auto replicas_only = [this](void (PsServerCore::*handler)(rpc::ServerCall)) {
    return [this, handler](rpc::ServerCall call) {
      if (!options_.replica_secret.empty() && !call.privileged_peer()) {
        replica_method_refusals_.fetch_add(1, std::memory_order_relaxed);
        return call.Fail(PermissionDenied(call.method() +
                                          " is for the shard's replicas: the caller did not "
                                          "prove the cluster's replica secret"));
      }
      (this->*handler)(std::move(call));
    };
  };
  BX_RETURN_IF_ERROR(
      server_->AddMethod(std::string(kForwardMethod), replicas_only(&PsServerCore::OnForward)));
  BX_RETURN_IF_ERROR(
      server_->AddMethod(std::string(kJoinMethod), replicas_only(&PsServerCore::OnJoin)));
  BX_RETURN_IF_ERROR(
      server_->AddMethod(std::string(kJoinV2Method), replicas_only(&PsServerCore::OnJoin)));
  BX_RETURN_IF_ERROR(
      server_->AddMethod(std::string(kJoinChunkMethod), replicas_only(&PsServerCore::OnJoinChunk)));
  BX_RETURN_IF_ERROR(server_->AddMethod(std::string(kJoinAttachMethod),
                                        replicas_only(&PsServerCore::OnJoinAttach)));
  BX_RETURN_IF_ERROR(server_->AddMethod(std::string(kStatMethod),
                                        [this](rpc::ServerCall call) { OnStat(std::move(call)); }));
  BX_RETURN_IF_ERROR(server_->AddMethod(std::string(kCheckpointMethod),
                                        replicas_only(&PsServerCore::OnCheckpoint)));
  BX_RETURN_IF_ERROR(server_->AddMethod(std::string(kCheckpointChunkMethod),
                                        replicas_only(&PsServerCore::OnCheckpointChunk)));
  BX_RETURN_IF_ERROR(
      server_->AddMethod(std::string(kHandoverMethod), replicas_only(&PsServerCore::OnHandover)));
  BX_RETURN_IF_ERROR(
      server_->AddMethod(std::string(kTakeOverMethod), replicas_only(&PsServerCore::OnTakeOver)));
  BX_RETURN_IF_ERROR(
      server_->AddMethod(std::string(kSyncDeltaMethod), replicas_only(&PsServerCore::OnSyncDelta)));
  BX_RETURN_IF_ERROR(
      server_->AddMethod(std::string(kSyncChunkMethod), replicas_only(&PsServerCore::OnSyncChunk)));
  return server_->AddMethod(std::string(kPingMethod),
                            [this](rpc::ServerCall call) { OnPing(std::move(call)); });
}

Status PsServerCore::BecomePrimary(uint64_t epoch, const std::vector<rpc::ReplicaAddress>& backups,
                                   ShardReplica::PrimaryGuard guard) {
  std::vector<std::shared_ptr<BackupLink>> links;
  std::lock_guard lock(backups_mu_);
  for (const rpc::ReplicaAddress& address : backups) {
    BX_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Client> shared,
                        rpc::Client::Create({address}, options_.backup_client));
    backup_clients_.push_back(shared);
    links.push_back(NewBackupLink(std::move(shared)));
  }
  return replica_.BecomePrimary(epoch, std::move(links), std::move(guard));
}

Result<std::shared_ptr<BackupLink>> PsServerCore::LinkTo(const rpc::ReplicaAddress& backup) {
  // One client per joining address, reused by its later joins (a client reconnects by itself),
  // so that a replica that joins again and again does not add clients without bound.
  std::lock_guard lock(backups_mu_);
  std::shared_ptr<rpc::Client>& shared = join_clients_[backup.rdma_url + " " + backup.tcp_url];
  if (!shared) {
    BX_ASSIGN_OR_RETURN(shared, rpc::Client::Create({backup}, options_.backup_client));
  }
  return NewBackupLink(shared);
}

std::shared_ptr<BackupLink> PsServerCore::NewBackupLink(std::shared_ptr<rpc::Client> client) const {
  return std::make_shared<RpcBackupLink>(std::move(client), options_.forward_timeout,
                                         options_.backup_client.slowest_transfer_bytes_per_second);
}

// The response is allocated at its final size and the table writes the rows straight into it:
// the values are copied once, from the table into the registered buffer the NIC sends from.
void PsServerCore::SetReadGate(std::function<Status()> gate) {
  read_gate_.Store(gate ? std::make_shared<const std::function<Status()>>(std::move(gate))
                        : nullptr);
}

void PsServerCore::OnFetch(rpc::ServerCall call) {
  fetches_.fetch_add(1, std::memory_order_relaxed);
  if (auto gate = read_gate_.Load()) {
    if (Status s = (*gate)(); !s.ok()) return call.Fail(s);
  }
  // The reply's bounds are checked before anything is allocated, the request's copy of its keys
  // included: one request of 2^24 keys on a wide table would otherwise take gigabytes here only
  // to be refused by the encoder.
  Result<FetchRequestShape> shape = DecodeFetchRequestShape(Bytes(call.request()));
  if (!shape.ok()) return call.Fail(shape.status());
  Result<uint32_t> dim = replica_.TableDim(shape->table_id);
  if (!dim.ok()) return call.Fail(dim.status());
  if (Status s = CheckFetchResponseBounds(shape->key_count, *dim); !s.ok()) return call.Fail(s);
  Result<FetchRequest> request = DecodeFetchRequest(Bytes(call.request()));
  if (!request.ok()) return call.Fail(request.status());
  Result<rpc::Message> response =
      rpc::Message::Allocate(FetchResponseSize(request->keys.size(), *dim));
  if (!response.ok()) return call.Fail(response.status());
  Status s = replica_.EncodeFetchResponse(*request, {response->data(), response->size()});
  if (!s.ok()) return call.Fail(s);
  call.Respond(std::move(response).value());
}

void PsServerCore::OnPush(rpc::ServerCall call) {
  Result<PushRequest> push = DecodePushRequest(Bytes(call.request()));
  if (!push.ok()) return call.Fail(push.status());
  // Checked where a push enters the shard, before the primary applies or forwards it: backups
  // apply what their primary accepted, so every replica stays the same.
  if (Status s = CheckGradients(*push, options_.max_abs_gradient); !s.ok()) {
    push_errors_.fetch_add(1, std::memory_order_relaxed);
    return call.Fail(s);
  }
  // ShardReplica's callback is a std::function (copyable); ServerCall is move-only.
  auto shared = std::make_shared<rpc::ServerCall>(std::move(call));
  replica_.HandlePush(std::move(push).value(), [this, shared](Result<PushAck> ack) {
    if (!ack.ok()) {
      push_errors_.fetch_add(1, std::memory_order_relaxed);
      return shared->Fail(ack.status());
    }
    if (!ack->session_expired) {
      (ack->duplicate ? pushes_duplicate_ : pushes_acked_).fetch_add(1, std::memory_order_relaxed);
    }
    Result<rpc::Message> response = rpc::Message::Allocate(PushAckSize());
    if (!response.ok()) return shared->Fail(response.status());
    if (Status s = EncodePushAck(*ack, {response->data(), response->size()}); !s.ok()) {
      return shared->Fail(s);
    }
    shared->Respond(std::move(response).value());
  });
}

void PsServerCore::OnForward(rpc::ServerCall call) {
  forwards_.fetch_add(1, std::memory_order_relaxed);
  Result<ForwardedPush> forwarded = DecodeForwardedPush(Bytes(call.request()));
  if (!forwarded.ok()) return call.Fail(forwarded.status());
  auto shared = std::make_shared<rpc::ServerCall>(std::move(call));
  replica_.HandleForward(std::move(forwarded).value(), [shared](Status status) {
    if (!status.ok()) return shared->Fail(status);
    Result<rpc::Message> empty = rpc::Message::Allocate(0);
    if (!empty.ok()) return shared->Fail(empty.status());
    shared->Respond(std::move(empty).value());
  });
}

void PsServerCore::OnPing(rpc::ServerCall call) {
  Result<rpc::Message> reply = rpc::Message::Allocate(kPingReplyBytes);
  if (!reply.ok()) return call.Fail(reply.status());
  EncodePingReply({replica_.role(), replica_.position()}, {reply->data(), reply->size()});
  call.Respond(std::move(reply).value());
}

void PsServerCore::LendSecrets(TransportOptions* transport) const {
  if (transport->auth_secret.empty()) transport->auth_secret = options_.auth_secret;
  if (transport->privileged_secret.empty()) transport->privileged_secret = options_.replica_secret;
}

PsServerCounters PsServerCore::counters() const {
  return {fetches_.load(),
          pushes_acked_.load(),
          pushes_duplicate_.load(),
          push_errors_.load(),
          forwards_.load(),
          replica_method_refusals_.load(),
          replica_.below_min_in_sync_refusals(),
          replica_.session_refusals(),
          replica_.dedup_clients(),
          replica_.dedup_evictions(),
          checkpoints_offered_.load()};
}

std::vector<PsTableStats> PsServerCore::TableStats(bool digest) const {
  std::vector<PsTableStats> out;
  replica_.ForEachTable([&](const Table& t) {
    const uint64_t rows = t.row_count();
    const PushAdmission* counts = replica_.state().admission(t.config().id);
    out.push_back({t.config().id, t.config().name, t.dim(), rows, t.RowBytes(rows), t.row_limit(),
                   t.evicted(), t.expired(), counts != nullptr ? counts->admitted() : 0,
                   counts != nullptr ? counts->rejected() : 0, digest ? t.Digest() : 0});
  });
  return out;
}

}  // namespace bx::ps
