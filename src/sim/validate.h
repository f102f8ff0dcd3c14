// The cross-validation scenarios of issue 21: the same small incast in our simulator and in
// ns-3 (tools/ns3_validate/bx_ns3_incast.cc takes the same parameters). N senders and one
// receiver on one switch (or on leaves under one spine; host h on leaf h % leaves), TCP-DCTCP
// from tcp_stack.h with no host cost, RED/ECN on every switch port. Optional background flows
// start at time 0, the incast flows at start_ns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/config.h"

namespace bx::sim {

struct IncastScenario {
  std::string name;
  std::string description;
  uint32_t senders = 4;
  uint64_t bytes = 256 << 10;  // per incast flow
  TimeNs start_ns = 0;         // incast flows start here
  uint32_t background = 0;     // background flows, from other senders, start at 0
  uint64_t background_bytes = 0;
  double gbps = 25;          // host links
  uint32_t leaves = 1;       // more than 1: two tiers, one spine above the leaves
  double uplink_gbps = 100;  // leaf-spine links
  TimeNs link_delay_ns = 1 * kMicrosecond;
  uint64_t ecn_kmin_bytes = 100000;  // kmin == kmax: DCTCP's step marking at K
  uint64_t ecn_kmax_bytes = 100000;
  double ecn_pmax = 0.2;
  TimeNs sample_ns = 1 * kMicrosecond;  // queue sampling interval
  bool ecn_at_enqueue = false;          // ours only: mark where ns-3's RED does
};

struct FlowResult {
  uint64_t bytes = 0;
  bool background = false;
  double fct_us = -1;  // -1: did not complete
};

struct IncastResult {
  std::vector<FlowResult> flows;
  bool complete = false;
  double queue_mean_bytes = 0;  // bottleneck egress queue, sampled every sample_ns
  uint64_t queue_max_bytes = 0;
  uint64_t queue_samples = 0;
  uint64_t ecn_marks = 0;
  uint64_t drops = 0;
};

// The scenarios `bx sim validate` runs, smallest first.
std::vector<IncastScenario> ValidationScenarios();

IncastResult RunIncastScenario(const IncastScenario& scenario, uint64_t seed = 1);

// The same scenario as bx_ns3_incast's command line.
std::vector<std::string> Ns3Arguments(const IncastScenario& scenario);

// Nearest-rank percentile of the completed flows' FCTs, microseconds (0 if none).
double FctPercentile(const IncastResult& result, double q);

}  // namespace bx::sim
