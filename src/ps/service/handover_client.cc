// HandOverShard (bx/ps/handover.h): the primary is found by pinging the shard's replicas, then
// asked "ps.Handover".
#include <algorithm>

#include "bx/ps/handover.h"
#include "ps/service/ps_service.h"

namespace bx::ps {

Result<HandoverResult> HandOverShard(const ClusterSpec& cluster, uint32_t shard,
                                     const HandoverOptions& options) {
  if (shard >= cluster.shards.size()) {
    return InvalidArgument("no shard " + std::to_string(shard) + " (the cluster has " +
                           std::to_string(cluster.shards.size()) + ")");
  }
  rpc::ClientOptions client_options = options.client;
  if (client_options.transport.auth_secret.empty()) {
    client_options.transport.auth_secret = cluster.secret;
  }
  if (client_options.transport.privileged_secret.empty()) {
    client_options.transport.privileged_secret = cluster.replica_secret;
  }
  std::unique_ptr<rpc::Client> primary;
  uint64_t primary_epoch = 0;
  std::string seen;
  const auto& replicas = cluster.shards[shard].replicas;
  for (size_t r = 0; r < replicas.size(); ++r) {
    rpc::ReplicaAddress address{cluster.transport == "tcp" ? "" : replicas[r].rdma,
                                replicas[r].tcp};
    BX_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Client> client,
                        rpc::Client::Create({address}, client_options));
    Result<PingReply> ping = Ping(*client, std::chrono::seconds(2));
    seen += "; replica " + std::to_string(r) + ": " +
            (ping.ok() ? std::string(ShardReplica::RoleName(ping->role)) + " of epoch " +
                             std::to_string(ping->position.epoch)
                       : ping.status().ToString());
    if (ping.ok() && ping->role == ShardReplica::Role::kPrimary &&
        ping->position.epoch >= primary_epoch) {
      primary = std::move(client);
      primary_epoch = ping->position.epoch;
    }
  }
  if (!primary) {
    return Unavailable("shard " + std::to_string(shard) + " has no primary to hand over" + seen);
  }
  BX_ASSIGN_OR_RETURN(rpc::Message request,
                      U64Message({options.to ? uint64_t{*options.to} : kAnyBackup,
                                  uint64_t(std::max<int64_t>(options.timeout.count(), 1))}));
  // The primary answers once the successor is named, within its own timeout; a second more
  // for the call itself.
  BX_ASSIGN_OR_RETURN(rpc::Message reply, CallOnce(*primary, kHandoverMethod, std::move(request),
                                                   options.timeout + std::chrono::seconds(1)));
  HandoverResult result;
  uint64_t successor = 0;
  if (!GetU64s(Bytes(reply), {&successor, &result.epoch, &result.lsn}) || successor > UINT32_MAX) {
    return DataLoss("ps.Handover: malformed reply");
  }
  result.successor = static_cast<uint32_t>(successor);
  return result;
}

}  // namespace bx::ps
