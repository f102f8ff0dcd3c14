// What a run measured. Filled by the fabric, the host stacks and the workload; a partitioned run
// fills one per partition and merges them (Merge), which gives the same figures as one run.
#pragma once

#include <algorithm>
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
  TimeNs first_xoff_at = -1;          // when that pause was sent (-1: none yet)
  uint64_t first_xoff_order = 0;      // and the order of the event that sent it
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
  uint64_t pushes_sent = 0;
  uint64_t pushes_delivered = 0;
  uint64_t push_incomplete = 0;  // sent - delivered, set by Finish
  std::vector<TimeNs> push_latency_ns;
  // Pushes not delivered when the run ended: how long each had waited by then. A push stuck
  // behind a 200 ms retransmission timeout in a 50 ms run is here, not in push_latency_ns.
  std::vector<TimeNs> push_incomplete_age_ns;
  std::vector<TimeNs> fetch_latency_ns;
  // Victim traffic, apart from the incast's (WorkloadConfig::victim_clients).
  std::vector<TimeNs> victim_push_latency_ns;
  std::vector<TimeNs> victim_fetch_latency_ns;
  uint64_t victim_sent = 0;
  uint64_t victim_done = 0;
  uint64_t victim_incomplete = 0;  // victim pushes and fetches not done by the end (Finish)

  // Adds `other` in. Samples are appended (percentiles sort them), counts added, peaks kept.
  void Merge(const Stats& other);
  // Derives the incomplete counts once every partition is merged.
  void Finish() {
    push_incomplete = pushes_sent - pushes_delivered;
    victim_incomplete = victim_sent - victim_done;
  }
};

inline void Stats::Merge(const Stats& o) {
  for (size_t t = 0; t < size_t(PauseTier::kCount); ++t) {
    pfc_xoff[t] += o.pfc_xoff[t];
    paused_ns[t] += o.paused_ns[t];
  }
  peak_buffer_bytes = std::max(peak_buffer_bytes, o.peak_buffer_bytes);
  bool earlier = o.first_xoff_at >= 0 &&
                 (first_xoff_at < 0 || o.first_xoff_at < first_xoff_at ||
                  (o.first_xoff_at == first_xoff_at && o.first_xoff_order < first_xoff_order));
  if (earlier) {
    first_xoff_at = o.first_xoff_at;
    first_xoff_order = o.first_xoff_order;
    first_xoff_occupancy = o.first_xoff_occupancy;
  }
  ecn_marks += o.ecn_marks;
  dcqcn_rate_cuts += o.dcqcn_rate_cuts;
  cnps += o.cnps;
  drops += o.drops;
  tcp_timeouts += o.tcp_timeouts;
  tcp_fast_retransmits += o.tcp_fast_retransmits;
  window_stalls += o.window_stalls;
  credit_stalls += o.credit_stalls;
  max_outstanding_bytes = std::max(max_outstanding_bytes, o.max_outstanding_bytes);
  headroom_overflow_bytes += o.headroom_overflow_bytes;
  iterations += o.iterations;
  pushes_sent += o.pushes_sent;
  pushes_delivered += o.pushes_delivered;
  auto append = [](std::vector<TimeNs>& to, const std::vector<TimeNs>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  append(push_latency_ns, o.push_latency_ns);
  append(push_incomplete_age_ns, o.push_incomplete_age_ns);
  append(fetch_latency_ns, o.fetch_latency_ns);
  append(victim_push_latency_ns, o.victim_push_latency_ns);
  append(victim_fetch_latency_ns, o.victim_fetch_latency_ns);
  victim_sent += o.victim_sent;
  victim_done += o.victim_done;
}

}  // namespace bx::sim
