// FailoverMonitorCore: the failure detector and promotion rule of `bx ps serve` (docs/PS.md
// "Automatic failover"), plus the "ps.Ping" reply codec it uses.
#include <algorithm>
#include <optional>
#include <utility>

#include "base/wire_encoding.h"
#include "bx/log.h"
#include "ps/service/ps_service.h"

namespace bx::ps {

namespace {
constexpr std::chrono::milliseconds kMinPingTimeout{50};
}  // namespace

void EncodePingReply(const PingReply& reply, std::span<std::byte> out) {
  WireWriter w(out);
  w.PutU8(static_cast<uint8_t>(reply.role));
  w.PutZeros(7);
  w.PutU64(reply.position.epoch);
  w.PutU64(reply.position.lsn);
}

Result<PingReply> DecodePingReply(std::span<const std::byte> bytes) {
  if (bytes.size() != kPingReplyBytes) {
    return Status(StatusCode::kDataLoss,
                  "ping reply of " + std::to_string(bytes.size()) + " bytes");
  }
  WireReader r(bytes);
  uint8_t role = 0;
  r.GetU8(&role);
  for (int i = 0; i < 7; ++i) {
    uint8_t zero = 0;
    r.GetU8(&zero);
    if (zero != 0) return Status(StatusCode::kDataLoss, "ping reply reserved byte");
  }
  if (role > static_cast<uint8_t>(ShardReplica::Role::kFenced)) {
    return Status(StatusCode::kDataLoss, "ping reply role");
  }
  PingReply reply;
  reply.role = static_cast<ShardReplica::Role>(role);
  r.GetU64(&reply.position.epoch);
  r.GetU64(&reply.position.lsn);
  return reply;
}

Result<std::unique_ptr<FailoverMonitorCore>> FailoverMonitorCore::Start(PsServerCore* server,
                                                                        FailoverOptions options) {
  const size_t n = options.replicas.size();
  if (server == nullptr || options.self >= n || options.initial_primary >= n ||
      options.self == options.initial_primary) {
    return Status(StatusCode::kInvalidArgument,
                  "failover: self and initial primary must be distinct replicas of the shard");
  }
  if (options.probe_interval.count() <= 0 || options.failure_timeout < options.probe_interval) {
    return Status(StatusCode::kInvalidArgument,
                  "failover: need 0 < probe interval <= failure timeout");
  }
  server->LendSecrets(&options.client.transport);
  std::unique_ptr<FailoverMonitorCore> monitor(new FailoverMonitorCore(server, std::move(options)));
  monitor->thread_ = std::thread([m = monitor.get()] { m->Run(); });
  return monitor;
}

FailoverMonitorCore::~FailoverMonitorCore() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FailoverMonitorCore::Log(const std::string& line) const {
  std::string text = "failover: " + line;
  if (options_.log) return options_.log(text);
  bx::Log(LogLevel::kInfo, text);
}

bool FailoverMonitorCore::Sleep(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return stop_; });
}

Result<rpc::Message> CallOnce(rpc::Client& client, std::string_view method, rpc::Message request,
                              std::chrono::milliseconds timeout) {
  return client
      .Call(method, std::move(request),
            rpc::CallOptions{.timeout = timeout, .idempotent = true, .max_attempts = 1})
      .get();
}

Result<PingReply> Ping(rpc::Client& client, std::chrono::milliseconds timeout) {
  BX_ASSIGN_OR_RETURN(rpc::Message request, rpc::Message::Allocate(0));
  BX_ASSIGN_OR_RETURN(rpc::Message reply,
                      CallOnce(client, kPingMethod, std::move(request), timeout));
  return DecodePingReply(Bytes(reply));
}

Result<PingReply> PingReplicaOnce(const rpc::ReplicaAddress& replica,
                                  const rpc::ClientOptions& options,
                                  std::chrono::milliseconds timeout) {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Client> client, rpc::Client::Create({replica}, options));
  return Ping(*client, timeout);
}

Result<PingReply> FailoverMonitorCore::PingReplica(size_t replica) const {
  // A fresh client must connect first (an RDMA handshake, slow on a loaded host), and this
  // answer decides whether a new epoch starts: it gets the failure timeout, not one probe.
  return PingReplicaOnce(options_.replicas[replica], options_.client, options_.failure_timeout);
}

std::optional<FailoverMonitorCore::Primary> FailoverMonitorCore::FindNewerPrimary(
    size_t watched, uint64_t min_epoch, const std::vector<bool>& dead,
    uint64_t* max_epoch_seen) const {
  for (size_t i = 0; i < options_.replicas.size(); ++i) {
    if (i == options_.self || i == watched || dead[i]) continue;
    Result<PingReply> ping = PingReplica(i);
    if (!ping.ok()) continue;
    *max_epoch_seen = std::max(*max_epoch_seen, ping->position.epoch);
    if (ping->role == ShardReplica::Role::kPrimary && ping->position.epoch >= min_epoch) {
      return Primary{i, ping->position.epoch};
    }
  }
  return std::nullopt;
}

void FailoverMonitorCore::Publish(size_t watched, uint64_t epoch, bool armed) {
  std::lock_guard lock(mu_);
  watch_ = {watched, epoch, armed};
}

FailoverMonitorCore::WatchState FailoverMonitorCore::watch_state() const {
  std::lock_guard lock(mu_);
  return watch_;
}

void FailoverMonitorCore::Run() {
  const size_t n = options_.replicas.size();
  std::vector<bool> dead(n, false);
  size_t watched = options_.initial_primary;
  // The epoch the watched replica is (or is expected to become) primary of.
  uint64_t expected_epoch = options_.initial_epoch;
  bool armed = false;  // the watched replica has answered as primary (or replaced a dead one)
  bool seen_primary = false;  // ...as primary, not only as the expected successor
  rpc::Clock::time_point last_ok = rpc::Clock::now();
  std::unique_ptr<rpc::Client> client;
  Publish(watched, expected_epoch, armed);
  do {
    ShardReplica::Role role = server_->replica().role();
    if (role != ShardReplica::Role::kBackup) {
      Log("this replica is " + std::string(ShardReplica::RoleName(role)) + "; monitor stops");
      return;
    }
    if (!client) {
      Result<std::unique_ptr<rpc::Client>> created =
          rpc::Client::Create({options_.replicas[watched]}, options_.client);
      if (!created.ok()) {
        Log("ping client for replica " + std::to_string(watched) + ": " +
            created.status().ToString());
        continue;
      }
      client = std::move(created).value();
    }
    // The deadline covers one probe; a slow answer counts as no answer.
    Result<PingReply> ping = Ping(*client, std::max(options_.probe_interval, kMinPingTimeout));
    const rpc::Clock::time_point now = rpc::Clock::now();
    if (ping.ok() && ping->role == ShardReplica::Role::kPrimary) {
      expected_epoch = std::max(expected_epoch, ping->position.epoch);
      if (!seen_primary) {
        Log("replica " + std::to_string(watched) + " is primary of epoch " +
            std::to_string(ping->position.epoch) + "; watching it");
      }
      armed = seen_primary = true;
      last_ok = now;
      Publish(watched, expected_epoch, armed);
      continue;
    }
    // A primary we have seen answering gets failure_timeout. A successor we are waiting for gets
    // twice that: its own detector started from its own last good ping, which may be later than
    // ours, and on a loaded machine its thread may run late.
    const auto grace = seen_primary ? options_.failure_timeout : 2 * options_.failure_timeout;
    if (!armed || now - last_ok < grace) continue;

    // Before declaring the watched replica dead, look for a replica that already is primary of
    // the expected epoch or a newer one (another monitor was faster than this one): follow it,
    // and do not start another epoch.
    uint64_t max_epoch_seen = server_->replica().position().epoch;
    if (std::optional<Primary> newer =
            FindNewerPrimary(watched, expected_epoch, dead, &max_epoch_seen)) {
      Log("replica " + std::to_string(watched) + " unreachable or not primary; replica " +
          std::to_string(newer->replica) + " already is primary of epoch " +
          std::to_string(newer->epoch) + "; watching it");
      dead[watched] = true;  // replaced: whoever promoted the newer primary found it dead
      watched = newer->replica;
      expected_epoch = newer->epoch;
      seen_primary = true;
      last_ok = now;
      client.reset();
      Publish(watched, expected_epoch, armed);
      continue;
    }

    // The watched replica is dead (or never became primary): the next live one in order takes
    // over, at an epoch above every epoch this replica has seen or expected.
    dead[watched] = true;
    const uint64_t epoch = std::max(expected_epoch, max_epoch_seen) + uint64_t{1};
    size_t next = watched;
    do {
      next = (next + 1) % n;
    } while (dead[next]);
    const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_ok);
    Log("replica " + std::to_string(watched) + " unreachable or not primary for " +
        std::to_string(silent.count()) + " ms; replica " + std::to_string(next) +
        " takes over at epoch " + std::to_string(epoch));
    if (next == options_.self) {
      std::vector<rpc::ReplicaAddress> backups;
      for (size_t i = 0; i < n; ++i) {
        if (i != options_.self && !dead[i]) backups.push_back(options_.replicas[i]);
      }
      if (Status s = server_->BecomePrimary(epoch, backups); !s.ok()) {
        Log("promotion failed: " + s.ToString());
        return;
      }
      promoted_epoch_.store(epoch);
      Log("promoted to primary of epoch " + std::to_string(epoch) + " with " +
          std::to_string(backups.size()) + " backups");
      return;
    }
    watched = next;
    expected_epoch = epoch;
    seen_primary = false;
    last_ok = now;  // it gets the successor's grace to answer as primary
    client.reset();
    Publish(watched, expected_epoch, armed);
  } while (Sleep(options_.probe_interval));
}

}  // namespace bx::ps
