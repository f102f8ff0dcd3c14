#include "sim/simulation.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "base/percentile.h"
#include "sim/dispatch.h"
#include "sim/event_queue.h"
#include "sim/messages.h"
#include "sim/network.h"
#include "sim/random.h"
#include "sim/rdma_stack.h"
#include "sim/tcp_stack.h"
#include "sim/workload.h"

namespace bx::sim {

const char* TierName(PauseTier tier) {
  switch (tier) {
    case PauseTier::kLeafToHost:
      return "leaf_to_host";
    case PauseTier::kLeafToSpine:
      return "leaf_to_spine";
    case PauseTier::kSpineToLeaf:
      return "spine_to_leaf";
    default:
      return "?";
  }
}

namespace {

double PercentileUs(std::vector<TimeNs>& samples, double q) {
  return double(Percentile(samples, q)) / 1000.0;
}

}  // namespace

SimResult RunSimulation(const SimConfig& config) {
  auto wall_start = std::chrono::steady_clock::now();
  SimResult result;
  result.config = config;
  Stats& stats = result.stats;

  EventQueue events;
  Random fabric_rng(config.seed * 2 + 1);
  MessageTable messages;
  uint32_t hosts = config.workload.hosts();
  Network network(config.fabric, hosts, &events, &fabric_rng, &stats);
  Workload workload(config.workload, config.seed * 2 + 2, &events, &messages, &stats);

  std::unique_ptr<RdmaStack> rdma;
  std::unique_ptr<TcpStack> tcp;
  if (config.transport == TransportKind::kRdma) {
    rdma = std::make_unique<RdmaStack>(config, &network, &events, &messages, &stats);
    rdma->SetSink(&workload);
    network.SetHostStack(rdma.get());
    workload.SetTransport(rdma.get());
    result.fragment_bytes = rdma->fragment_bytes();
  } else {
    tcp = std::make_unique<TcpStack>(config, &network, &events, &messages, &stats);
    tcp->SetSink(&workload);
    network.SetHostStack(tcp.get());
    workload.SetTransport(tcp.get());
  }

  workload.Start();
  while (!events.empty() && events.NextTime() <= config.duration_ns) {
    Event e = events.Pop();
    DispatchEvent(e, network, tcp.get(), [&](const Event& w) { workload.OnTimer(w.a, w.b); });
  }

  network.Finish(config.duration_ns);
  workload.Finish(config.duration_ns);
  if (rdma) rdma->Finish();

  result.events = events.processed();
  result.sim_seconds = double(config.duration_ns) / double(kSecond);
  result.push_p50_us = PercentileUs(stats.push_latency_ns, 0.50);
  result.push_p99_us = PercentileUs(stats.push_latency_ns, 0.99);
  std::vector<TimeNs> censored = stats.push_latency_ns;
  censored.insert(censored.end(), stats.push_incomplete_age_ns.begin(),
                  stats.push_incomplete_age_ns.end());
  result.push_p99_censored_us = PercentileUs(censored, 0.99);
  result.fetch_p50_us = PercentileUs(stats.fetch_latency_ns, 0.50);
  result.fetch_p99_us = PercentileUs(stats.fetch_latency_ns, 0.99);
  result.victim_push_p50_us = PercentileUs(stats.victim_push_latency_ns, 0.50);
  result.victim_push_p99_us = PercentileUs(stats.victim_push_latency_ns, 0.99);
  result.victim_fetch_p50_us = PercentileUs(stats.victim_fetch_latency_ns, 0.50);
  result.victim_fetch_p99_us = PercentileUs(stats.victim_fetch_latency_ns, 0.99);
  result.directed_links = network.directed_links();
  double link_time = double(result.directed_links) * double(config.duration_ns);
  for (size_t t = 0; t < size_t(PauseTier::kCount); ++t) {
    result.pfc_xoff += stats.pfc_xoff[t];
    result.paused_fraction_by_tier[t] = double(stats.paused_ns[t]) / link_time;
    result.paused_fraction += result.paused_fraction_by_tier[t];
  }
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace bx::sim
