// How both simulated host stacks number their connection endpoints. Hosts are laid out as
// parameter servers [0, servers), trainers, then the victim hosts of WorkloadConfig: cold servers,
// then victim clients. Each (trainer, server) pair is one connection qp = (trainer - servers) *
// servers + server; each (victim client, hot or cold server) pair follows, qp = incast_qps +
// client index * victim targets + target index (hot servers first, then cold ones). Endpoint
// qp * 2 is at the trainer or client, qp * 2 + 1 at the server, so `endpoint ^ 1` is the peer's.
#pragma once

#include <cstdint>

#include "sim/config.h"

namespace bx::sim {

class EndpointMap {
 public:
  explicit EndpointMap(const WorkloadConfig& w)
      : servers_(w.servers),
        incast_qps_(w.servers * w.trainers),
        first_cold_(w.servers + w.trainers),
        first_client_(first_cold_ + w.victim_servers),
        targets_(w.servers + w.victim_servers) {}

  // Connections, incast and victim ones.
  static uint32_t Qps(const WorkloadConfig& w) {
    return w.servers * w.trainers + w.victim_clients * (w.servers + w.victim_servers);
  }

  uint32_t HostOf(uint32_t endpoint) const {
    uint32_t qp = endpoint / 2;
    if (qp >= incast_qps_) return VictimHostOf(endpoint);
    return endpoint % 2 == 0 ? servers_ + qp / servers_ : qp % servers_;
  }
  // The endpoint at `from` of the connection between `from` and `to`.
  uint32_t EndpointFor(uint32_t from, uint32_t to) const {
    // Without victims first_client_ is past every host: these two tests never pass.
    if (from >= first_client_) return VictimQp(from, to) * 2;
    if (to >= first_client_) return VictimQp(to, from) * 2 + 1;
    if (from >= servers_) return ((from - servers_) * servers_ + to) * 2;
    return ((to - servers_) * servers_ + from) * 2 + 1;
  }

 private:
  uint32_t VictimQp(uint32_t client, uint32_t server) const {
    uint32_t target = server < servers_ ? server : servers_ + (server - first_cold_);
    return incast_qps_ + (client - first_client_) * targets_ + target;
  }
  uint32_t VictimHostOf(uint32_t endpoint) const {
    uint32_t index = endpoint / 2 - incast_qps_;
    if (endpoint % 2 == 0) return first_client_ + index / targets_;
    uint32_t target = index % targets_;
    return target < servers_ ? target : first_cold_ + (target - servers_);
  }

  uint32_t servers_;
  uint32_t incast_qps_;
  uint32_t first_cold_;
  uint32_t first_client_;
  uint32_t targets_;
};

}  // namespace bx::sim
