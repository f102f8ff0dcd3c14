// DispatchEvent: one simulated event to the part of the model that owns it. Every simulation
// loop (the incast, the ns-3 validation scenarios) runs its events through here, so a new kind
// of event is handled everywhere or nowhere.
#pragma once

#include "sim/event_queue.h"
#include "sim/network.h"
#include "sim/tcp_stack.h"

namespace bx::sim {

// `tcp`: the TCP stack whose timers fire, or null (RDMA runs have no host timers); `workload`:
// what a kWorkload event is for (called with the event).
template <typename OnWorkload>
void DispatchEvent(const Event& e, Network& network, TcpStack* tcp, OnWorkload&& workload) {
  switch (e.kind) {
    case EventKind::kPortTxDone:
      network.OnTxDone(e.a);
      break;
    case EventKind::kPacketArrive:
      network.OnArrive(e.a);
      break;
    case EventKind::kPauseArrive:
      network.OnPause(e.a, e.b != 0);
      break;
    case EventKind::kNicWake:
      network.OnNicWake(e.a);
      break;
    case EventKind::kHostTimer:
      if (tcp != nullptr) tcp->OnTimer(e.b, e.a);
      break;
    case EventKind::kWorkload:
      workload(e);
      break;
  }
}

}  // namespace bx::sim
