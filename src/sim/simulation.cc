#include "sim/simulation.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "base/percentile.h"
#include "sim/dispatch.h"
#include "sim/event_queue.h"
#include "sim/messages.h"
#include "sim/network.h"
#include "sim/partition.h"
#include "sim/rdma_stack.h"
#include "sim/spin_barrier.h"
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

// How many partitions a run gets: what it asks for, at most one per leaf, and one for TCP (whose
// receivers read their senders' state) or for links without delay (no lookahead).
uint32_t PartitionCount(const SimConfig& config) {
  if (config.transport != TransportKind::kRdma || config.fabric.link_delay_ns <= 0) return 1;
  uint32_t leaves = Network::LeafCount(config.fabric, config.workload.hosts());
  return std::clamp<uint32_t>(config.threads, 1, std::min<uint32_t>(leaves, 64));
}

// Which partition each node goes to. A leaf goes with its hosts; leaves and then spines go one by
// one to the partition with the least work so far. Work is counted per packet crossing the fabric:
// six events at a leaf and its hosts (two at each leaf, one at each host), two at a spine, so a
// leaf weighs three times its hosts and all spines together weigh the hosts once. 15 leaves in two
// partitions: 8 and 7 leaves with 3 and 5 spines, work within 3% (one spine each way: 10%).
std::vector<uint8_t> AssignNodes(const Network& network, uint32_t count) {
  std::vector<uint8_t> of_node(network.nodes());
  std::vector<uint64_t> work(count, 0);
  auto lightest = [&] {
    return uint32_t(std::min_element(work.begin(), work.end()) - work.begin());
  };
  std::vector<uint32_t> hosts_on_leaf(network.leaves(), 0);
  for (uint32_t h = 0; h < network.hosts(); ++h) ++hosts_on_leaf[network.LeafOf(h)];
  for (uint32_t l = 0; l < network.leaves(); ++l) {
    uint32_t to = lightest();
    of_node[network.LeafNode(l)] = uint8_t(to);
    work[to] += 3ull * network.spines() * hosts_on_leaf[l];
  }
  for (uint32_t s = 0; s < network.spines(); ++s) {
    uint32_t to = lightest();
    of_node[network.SpineNode(s)] = uint8_t(to);
    work[to] += network.hosts();
  }
  for (uint32_t h = 0; h < network.hosts(); ++h) {
    of_node[h] = of_node[network.LeafNode(network.LeafOf(h))];
  }
  return of_node;
}

// One partition: the whole model, running the events of its own nodes (AssignNodes).
struct Partition {
  Partition(const SimConfig& config, uint32_t self, uint32_t count, Exchange* exchange)
      : messages(self),
        network(config.fabric, config.workload.hosts(), &events, config.seed * 2 + 1, &stats),
        workload(config.workload, config.seed * 2 + 2, &events, &messages, &stats, &partitioning) {
    partitioning.self = self;
    if (count > 1) {
      partitioning.of_node = AssignNodes(network, count);
      network.SetPartition(&partitioning, exchange);
    }
    events.SetRunObserver(&Partition::PrefetchArrivals, this);
    if (config.transport == TransportKind::kRdma) {
      rdma = std::make_unique<RdmaStack>(config, &network, &events, &messages, &stats);
      rdma->SetSink(&workload);
      network.SetHostStack(rdma.get());
      workload.SetTransport(rdma.get());
    } else {
      tcp = std::make_unique<TcpStack>(config, &network, &events, &messages, &stats);
      tcp->SetSink(&workload);
      network.SetHostStack(tcp.get());
      workload.SetTransport(tcp.get());
    }
  }

  // The packets of a bucket's arrivals are mostly cache misses (each crossed a link since it was
  // last touched): start loading them all before the first pops.
  static void PrefetchArrivals(void* self, const Event* events, size_t count) {
    const Network& network = static_cast<Partition*>(self)->network;
    for (size_t i = 0; i < count; ++i) {
      if (events[i].kind == EventKind::kPacketArrive) network.PrefetchPacket(events[i].a);
    }
  }

  // Handles this partition's events before `end`.
  void RunUntil(TimeNs end) {
    while (!events.empty() && events.NextTime() < end) {
      Event e = events.Pop();
      DispatchEvent(e, network, tcp.get(), [&](const Event& w) { workload.OnTimer(w.a, w.b); });
    }
  }

  Partitioning partitioning;
  EventQueue events;
  MessageTable messages;
  Stats stats;
  Network network;
  Workload workload;
  std::unique_ptr<RdmaStack> rdma;
  std::unique_ptr<TcpStack> tcp;
};

// Runs the partitions in windows of `lookahead` (the link delay), [k L, (k + 1) L): nothing one
// partition does in a window can reach another before the window ends, so each runs its window
// alone, and they meet once per window. After meeting, each takes what the others handed over in
// the window just ended (Exchange says why that needs no second meeting).
void RunPartitions(std::vector<std::unique_ptr<Partition>>& parts, Exchange* exchange,
                   TimeNs duration, TimeNs lookahead) {
  const auto count = uint32_t(parts.size());
  if (count == 1) {
    parts[0]->RunUntil(duration + 1);
    return;
  }
  SpinBarrier barrier(count);
  auto run = [&](uint32_t self) {
    Partition& p = *parts[self];
    for (uint64_t window = 0;; ++window) {
      p.network.SetWindow(window);
      TimeNs end = TimeNs(window + 1) * lookahead;
      p.RunUntil(std::min(end, duration + 1));
      for (uint32_t id : p.messages.remote_releases()) {
        exchange->Releases(self, MessageTable::Owner(id), window).push_back(id);
      }
      p.messages.remote_releases().clear();
      barrier.Wait();
      for (uint32_t from = 0; from < count; ++from) {
        std::vector<Handover>& box = exchange->Box(from, self, window);
        for (Handover& h : box) p.network.Receive(h);
        box.clear();
        std::vector<uint32_t>& releases = exchange->Releases(from, self, window);
        for (uint32_t id : releases) p.messages.ReleaseDelivered(id);
        releases.clear();
      }
      if (end > duration) return;
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t i = 1; i < count; ++i) threads.emplace_back(run, i);
  run(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace

SimResult RunSimulation(const SimConfig& config) {
  auto wall_start = std::chrono::steady_clock::now();
  SimResult result;
  result.config = config;
  Stats& stats = result.stats;

  const uint32_t count = PartitionCount(config);
  Exchange exchange(count);
  std::vector<std::unique_ptr<Partition>> parts;
  for (uint32_t i = 0; i < count; ++i) {
    parts.push_back(std::make_unique<Partition>(config, i, count, &exchange));
  }
  for (auto& p : parts) p->workload.Start();
  RunPartitions(parts, &exchange, config.duration_ns, config.fabric.link_delay_ns);

  for (auto& p : parts) {
    p->network.Finish(config.duration_ns);
    p->workload.Finish(config.duration_ns);
    if (p->rdma) p->rdma->Finish();
    stats.Merge(p->stats);
    result.events += p->events.processed();
  }
  stats.Finish();
  const Network& network = parts[0]->network;
  if (parts[0]->rdma) result.fragment_bytes = parts[0]->rdma->fragment_bytes();
  result.partitions = count;

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
