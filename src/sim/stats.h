// What a run measured. Filled by the fabric, the host stacks and the workload.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/config.h"

namespace bx::sim {

// Which kind of link a pause stopped (the tier of the switch that sent the pause).
enum class PauseTier : uint8_t { kLeafToHost, kLeafToSpine, kSpineToLeaf, kCount };

struct Stats {
  uint64_t pfc_xoff[size_t(PauseTier::kCount)] = {};
  TimeNs paused_ns[size_t(PauseTier::kCount)] = {};
  uint64_t peak_buffer_bytes = 0;     // the fullest switch, at its fullest
  uint64_t first_xoff_occupancy = 0;  // shared use of the ingress queue that paused first
  uint64_t ecn_marks = 0;
  uint64_t dcqcn_rate_cuts = 0;
  uint64_t cnps = 0;
  uint64_t drops = 0;
  uint64_t tcp_timeouts = 0;
  uint64_t tcp_fast_retransmits = 0;
  uint64_t window_stalls = 0;
  uint64_t credit_stalls = 0;
  uint64_t max_outstanding_bytes = 0;  // largest SendWindow::max_outstanding over engines
  uint64_t headroom_overflow_bytes = 0;
  uint64_t iterations = 0;
  uint64_t push_incomplete = 0;
  std::vector<TimeNs> push_latency_ns;
  // Pushes not delivered when the run ended: how long each had waited by then. A push stuck
  // behind a 200 ms retransmission timeout in a 50 ms run is here, not in push_latency_ns.
  std::vector<TimeNs> push_incomplete_age_ns;
  std::vector<TimeNs> fetch_latency_ns;
  // Victim traffic, apart from the incast's (WorkloadConfig::victim_clients).
  std::vector<TimeNs> victim_push_latency_ns;
  std::vector<TimeNs> victim_fetch_latency_ns;
  uint64_t victim_incomplete = 0;  // victim pushes and fetches not done by the end
};

}  // namespace bx::sim
