// The connecting side's pool: the engines this process holds to each listener url, which
// sockets share (QP multiplexing), and how a socket picks one (RdmaOptions::spread). Kept apart
// from the transport's creation and from an engine's set-up, which it only calls.
#include <algorithm>
#include <mutex>

#include "transport/rdma/rdma_transport_impl.h"
#include "transport/socket_util.h"

namespace bx::rdma {

void RdmaTransportImpl::Forget(RdmaConnection* connection) {
  std::lock_guard lock(mu_);
  auto it = connections_.find(connection);
  if (it == connections_.end()) return;
  for (auto& [url, destination] : pool_) std::erase(destination->connections, it->second);
  connections_.erase(it);
}

void RdmaTransportImpl::ReleaseUser(const std::shared_ptr<RdmaConnection>& connection) {
  {
    std::lock_guard lock(mu_);
    if (connection->users > 0) --connection->users;
    if (connection->users > 0 || connection->torn_down()) return;
    // Out of the pool under the lock Acquire picks under: nobody can take it from here on.
    for (auto& [url, destination] : pool_) std::erase(destination->connections, connection);
  }
  connection->Teardown(Aborted("no sockets left on the engine"));
}

std::shared_ptr<RdmaConnection> RdmaTransportImpl::PickLocked(Destination& destination) {
  auto& list = destination.connections;
  if (list.empty() || list.size() < size_t(std::max(1, rdma_.engines_per_destination)))
    return nullptr;
  std::shared_ptr<RdmaConnection> pick;
  if (rdma_.spread == RdmaOptions::Spread::kRoundRobin) {
    pick = list[destination.next++ % list.size()];
  } else {
    pick = *std::min_element(list.begin(), list.end(),
                             [](const auto& a, const auto& b) { return a->users < b->users; });
  }
  ++pick->users;
  return pick;
}

Result<std::shared_ptr<RdmaConnection>> RdmaTransportImpl::Acquire(
    const Url& url, std::chrono::steady_clock::time_point deadline) {
  const std::string key = url.ToString();
  std::shared_ptr<Destination> destination;
  {
    std::lock_guard lock(mu_);
    auto& slot = pool_[key];
    if (!slot) slot = std::make_shared<Destination>();
    destination = slot;
    if (auto pick = PickLocked(*destination)) return pick;
  }
  // Not enough engines yet: set one up, one handshake per destination at a time, so that a
  // burst of connects to a new destination makes one engine, not one each.
  std::lock_guard establishing(destination->establish_mu);
  {
    std::lock_guard lock(mu_);
    if (auto pick = PickLocked(*destination)) return pick;
  }
  BX_ASSIGN_OR_RETURN(transport::ConnectedSocket connected, transport::ConnectFirst(url, deadline));
  transport::SetBlocking(connected.fd);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  BX_ASSIGN_OR_RETURN(std::shared_ptr<RdmaConnection> connection,
                      EstablishConnecting(UniqueFd(connected.fd), key,
                                          std::max(left, std::chrono::milliseconds(1))));
  std::lock_guard lock(mu_);
  if (!connection->torn_down()) destination->connections.push_back(connection);
  ++connection->users;
  return connection;
}

}  // namespace bx::rdma
