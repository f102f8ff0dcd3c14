// One run of the fabric simulation: builds the fabric, the host stacks and the workload from a
// SimConfig, runs the event loop to duration_ns of virtual time, and summarises what happened.
// An RDMA run may be split into partitions that run in parallel (SimConfig::threads); the result
// is the same for every partition count.
#pragma once

#include <cstdint>
#include <string>

#include "sim/config.h"
#include "sim/stats.h"

namespace bx::sim {

struct SimResult {
  SimConfig config;
  Stats stats;
  uint32_t fragment_bytes = 0;  // as the engines used it
  double push_p50_us = 0, push_p99_us = 0;
  // P99 over delivered pushes and, at their age when the run ended, undelivered ones: a lower
  // bound of the P99 had the run waited for every push. It differs from push_p99_us only when
  // more than 1% of pushes are still waiting (say, behind a timeout longer than the run).
  double push_p99_censored_us = 0;
  double fetch_p50_us = 0, fetch_p99_us = 0;
  double victim_push_p50_us = 0, victim_push_p99_us = 0;  // 0 without victims
  double victim_fetch_p50_us = 0, victim_fetch_p99_us = 0;
  uint64_t pfc_xoff = 0;
  double paused_fraction = 0;  // paused link-time / (directed links x duration)
  double paused_fraction_by_tier[size_t(PauseTier::kCount)] = {};
  double sim_seconds = 0;
  double wall_seconds = 0;
  uint64_t events = 0;
  uint32_t partitions = 1;  // threads the run used
  uint32_t directed_links = 0;
};

SimResult RunSimulation(const SimConfig& config);

const char* TierName(PauseTier tier);

}  // namespace bx::sim
