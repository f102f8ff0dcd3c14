// How both simulated host stacks number their connection endpoints. Hosts 0..servers-1 are
// parameter servers, the rest trainers; each (trainer, server) pair is one connection qp =
// (trainer - servers) * servers + server, with endpoint qp * 2 at the trainer and qp * 2 + 1 at
// the server, so `endpoint ^ 1` is the peer's end.
#pragma once

#include <cstdint>

namespace bx::sim {

struct EndpointMap {
  uint32_t servers;

  uint32_t HostOf(uint32_t endpoint) const {
    uint32_t qp = endpoint / 2;
    return endpoint % 2 == 0 ? servers + qp / servers : qp % servers;
  }
  // The endpoint at `from` of the connection between `from` and `to`.
  uint32_t EndpointFor(uint32_t from, uint32_t to) const {
    if (from >= servers) return ((from - servers) * servers + to) * 2;
    return ((to - servers) * servers + from) * 2 + 1;
  }
};

}  // namespace bx::sim
