// The simulator's cross-validation scenarios: the same small incast in our simulator and in
// ns-3 (tools/ns3_validate/bx_ns3_incast.cc takes the same parameters). N senders and one
// receiver on one switch (or on leaves under one or more spines; host h on leaf h % leaves),
// TCP-DCTCP from tcp_stack.h with no host cost, RED/ECN on every switch port. Optional background
// flows start at time 0, the incast flows at start_ns. Hosts are numbered receivers first, then
// the incast senders, then the background ones.
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
  double gbps = 25;  // host links
  // More than one: flow i goes to receiver (i + 1) % receivers, which with two leaves and as many
  // receivers as senders is a permutation across the spines.
  uint32_t receivers = 1;
  uint32_t leaves = 1;       // more than 1: two tiers, `spines` spines above the leaves
  uint32_t spines = 1;       // more than 1: ECMP per flow (Network::EcmpSpine)
  double uplink_gbps = 100;  // each leaf-spine link
  TimeNs link_delay_ns = 1 * kMicrosecond;
  uint64_t ecn_kmin_bytes = 100000;  // kmin == kmax: DCTCP's step marking at K
  uint64_t ecn_kmax_bytes = 100000;
  double ecn_pmax = 0.2;
  // Queue sampling interval. The queue sampled is the one toward receiver 0 or, with several
  // spines, leaf 0's uplinks together (where ECMP's collisions queue).
  TimeNs sample_ns = 1 * kMicrosecond;
  bool ecn_at_enqueue = false;  // ours only: mark where ns-3's RED does
  // Ours only: TCP's ACKs wait in the switches' data queues, as in ns-3, where every port is one
  // FIFO (false: the strict-priority control queue, bx sim incast's default). It matters only
  // where ACKs cross a port that data congests (ecmp-8x1M).
  bool tcp_acks_with_data = true;
  // Ours only: TcpConfig::grow_only_when_cwnd_limited (Linux's check; ns-3 3.37 has none).
  bool tcp_cwnd_limited = false;
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

// The receiver of flow i.
uint32_t ReceiverOf(const IncastScenario& scenario, uint32_t flow);

// Each flow's spine with several spines: its data's and its ACKs', as our ECMP hashes them.
struct EcmpPath {
  uint32_t data_spine = 0;
  uint32_t ack_spine = 0;
};
std::vector<EcmpPath> EcmpPaths(const IncastScenario& scenario);

// The same scenario as bx_ns3_incast's command line. ns-3 3.37 has no per-flow ECMP, so with
// several spines it is told each flow's paths: ours, or (a control) each leaf's flows dealt
// round-robin over the spines, so that no two of them collide.
std::vector<std::string> Ns3Arguments(const IncastScenario& scenario, bool even_paths = false);

// Nearest-rank percentile of the completed flows' FCTs, microseconds (0 if none).
double FctPercentile(const IncastResult& result, double q);

}  // namespace bx::sim
