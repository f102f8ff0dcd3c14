#include "ps_reach.h"

#include <fmt/format.h>

#include <future>
#include <vector>

namespace bx::tools {

std::string ConnectFailureCause(const Status& status, std::chrono::milliseconds timeout) {
  const std::string& text = status.message();
  if (text.find("Connection refused") != std::string::npos) {
    return "connection refused (nothing listens there)";
  }
  constexpr std::string_view kAuth = "peer failed authentication";
  if (size_t at = text.find(kAuth); at != std::string::npos) {
    return "authentication refused" + text.substr(at + kAuth.size());
  }
  if (status.code() == StatusCode::kDeadlineExceeded ||
      text.find("timed out") != std::string::npos) {
    return fmt::format("no answer within {:.1f} s (timeout)", double(timeout.count()) / 1000);
  }
  return status.ToString();
}

Result<std::unique_ptr<Transport>> CreateSharedClientTransport(const ps::ClusterSpec& spec,
                                                               const std::string& scheme,
                                                               ps::PsClientOptions* options) {
  TransportOptions transport_options;
  transport_options.auth_secret = spec.secret;
  BX_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                      CreateTransport(scheme, transport_options));
  (scheme == "rdma" ? options->rpc.rdma_transport : options->rpc.tcp_transport) = transport.get();
  return transport;
}

Status CheckShardsReachable(const ps::ClusterSpec& spec, Transport& transport,
                            std::chrono::milliseconds timeout) {
  const bool rdma = transport.scheme() == "rdma";
  // Every connect at once, so that the check takes one timeout at most, whatever the size.
  std::vector<std::vector<std::future<Status>>> tried(spec.shards.size());
  for (size_t s = 0; s < spec.shards.size(); ++s) {
    for (const ps::ReplicaSpec& replica : spec.shards[s].replicas) {
      const std::string url = rdma ? replica.rdma : replica.tcp;
      tried[s].push_back(std::async(std::launch::async, [&transport, url, timeout] {
        if (url.empty()) return Status(StatusCode::kInvalidArgument, "no url for this scheme");
        Result<std::shared_ptr<Socket>> socket = transport.Connect(url, {}, timeout);
        if (!socket.ok()) return socket.status();
        (*socket)->Close();
        return Status::Ok();
      }));
    }
  }
  std::string unreachable;
  for (size_t s = 0; s < tried.size(); ++s) {
    std::string causes;
    bool reached = false;
    for (size_t r = 0; r < tried[s].size(); ++r) {
      Status status = tried[s][r].get();
      reached = reached || status.ok();
      const ps::ReplicaSpec& replica = spec.shards[s].replicas[r];
      causes +=
          fmt::format("{}{} {}", causes.empty() ? "" : ", ", rdma ? replica.rdma : replica.tcp,
                      ConnectFailureCause(status, timeout));
    }
    if (!reached)
      unreachable += fmt::format("{}shard {}: {}", unreachable.empty() ? "" : "; ", s, causes);
  }
  if (unreachable.empty()) return Status::Ok();
  return Status(StatusCode::kUnavailable,
                "no replica of some shard is reachable (" + unreachable +
                    "); start `bx ps serve` for each, or check the cluster file's addresses and "
                    "secret");
}

}  // namespace bx::tools
