// Whole-simulation properties at small scale: determinism, the window's effect, the workload's
// message sizes.
#include "sim/simulation.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "sim/random.h"

namespace bx::sim {
namespace {

SimConfig Small(uint64_t window, uint64_t seed = 1) {
  SimConfig c;
  c.workload.servers = 8;
  c.workload.trainers = 24;
  c.engine.window_bytes = window;
  c.duration_ns = 10 * kMillisecond;
  c.seed = seed;
  return c;
}

// Every measured field, so a change in event order anywhere shows up.
void ExpectSameResult(const SimResult& a, const SimResult& b, bool same_event_count = true) {
  if (same_event_count) {
    EXPECT_EQ(a.events, b.events);
  }
  const Stats& x = a.stats;
  const Stats& y = b.stats;
  for (size_t t = 0; t < size_t(PauseTier::kCount); ++t) {
    EXPECT_EQ(x.pfc_xoff[t], y.pfc_xoff[t]);
    EXPECT_EQ(x.paused_ns[t], y.paused_ns[t]);
  }
  EXPECT_EQ(x.peak_buffer_bytes, y.peak_buffer_bytes);
  EXPECT_EQ(x.first_xoff_occupancy, y.first_xoff_occupancy);
  EXPECT_EQ(x.ecn_marks, y.ecn_marks);
  EXPECT_EQ(x.dcqcn_rate_cuts, y.dcqcn_rate_cuts);
  EXPECT_EQ(x.cnps, y.cnps);
  EXPECT_EQ(x.drops, y.drops);
  EXPECT_EQ(x.tcp_timeouts, y.tcp_timeouts);
  EXPECT_EQ(x.tcp_fast_retransmits, y.tcp_fast_retransmits);
  EXPECT_EQ(x.window_stalls, y.window_stalls);
  EXPECT_EQ(x.credit_stalls, y.credit_stalls);
  EXPECT_EQ(x.max_outstanding_bytes, y.max_outstanding_bytes);
  EXPECT_EQ(x.headroom_overflow_bytes, y.headroom_overflow_bytes);
  EXPECT_EQ(x.iterations, y.iterations);
  EXPECT_EQ(x.push_incomplete, y.push_incomplete);
  EXPECT_EQ(x.push_latency_ns, y.push_latency_ns);
  EXPECT_EQ(x.push_incomplete_age_ns, y.push_incomplete_age_ns);
  EXPECT_EQ(x.fetch_latency_ns, y.fetch_latency_ns);
  EXPECT_EQ(x.victim_push_latency_ns, y.victim_push_latency_ns);
  EXPECT_EQ(x.victim_fetch_latency_ns, y.victim_fetch_latency_ns);
  EXPECT_EQ(x.victim_incomplete, y.victim_incomplete);
}

// 7 ms runs: a change in event order shows from the first event it moves (5 ms gave too few
// samples for the counts checked below).
SimConfig Short(uint64_t window, uint64_t seed) {
  SimConfig c = Small(window, seed);
  c.duration_ns = 7 * kMillisecond;
  return c;
}

TEST(Simulation, DeterministicForASeed) {
  for (uint64_t window : {uint64_t(0), uint64_t(4096)}) {
    SimResult a = RunSimulation(Short(window, 3));
    SimResult b = RunSimulation(Short(window, 3));
    ExpectSameResult(a, b);
    EXPECT_GT(a.stats.push_latency_ns.size(), 1000u);
  }
  SimConfig tcp = Short(0, 3);
  tcp.transport = TransportKind::kTcp;
  ExpectSameResult(RunSimulation(tcp), RunSimulation(tcp));
  // Victim flows (two racks: 36 hosts), over RDMA and TCP.
  SimConfig victims = Short(0, 3);
  victims.workload.victim_servers = 2;
  victims.workload.victim_clients = 2;
  for (TransportKind transport : {TransportKind::kRdma, TransportKind::kTcp}) {
    victims.transport = transport;
    SimResult v = RunSimulation(victims);
    ExpectSameResult(v, RunSimulation(victims));
    EXPECT_GT(v.stats.victim_push_latency_ns.size(), 100u);
    EXPECT_GT(v.stats.victim_fetch_latency_ns.size(), 100u);
  }
  SimResult a = RunSimulation(Short(0, 3));
  SimResult c = RunSimulation(Short(0, 4));
  EXPECT_NE(a.stats.push_latency_ns, c.stats.push_latency_ns);
}

// Serialisation ends that find nothing waiting are not scheduled (network.h), and that must not
// move any other event: every result is the same as with all of them scheduled, for fewer events.
TEST(Simulation, SkippingIdlePortEventsChangesNoResult) {
  SimConfig rdma = Small(4096, 5);
  SimConfig rdma_no_window = Small(0, 5);
  SimConfig tcp = Small(0, 5);
  tcp.transport = TransportKind::kTcp;
  SimConfig victims = Small(0, 5);
  victims.workload.victim_servers = 2;
  victims.workload.victim_clients = 2;
  for (SimConfig skipping : {rdma, rdma_no_window, tcp, victims}) {
    SimConfig all = skipping;
    all.fabric.skip_idle_port_events = false;
    SimResult fast = RunSimulation(skipping);
    SimResult slow = RunSimulation(all);
    ExpectSameResult(fast, slow, /*same_event_count=*/false);
    EXPECT_GT(fast.stats.push_latency_ns.size(), 1000u);
    EXPECT_LT(double(fast.events), 0.85 * double(slow.events));
  }
}

// The samples of a partitioned run come merged partition by partition: the same multiset in
// another order.
SimResult Sorted(SimResult r) {
  Stats& s = r.stats;
  for (std::vector<TimeNs>* v : {&s.push_latency_ns, &s.push_incomplete_age_ns, &s.fetch_latency_ns,
                                 &s.victim_push_latency_ns, &s.victim_fetch_latency_ns}) {
    std::sort(v->begin(), v->end());
  }
  return r;
}

// A run split into partitions that run in parallel (simulation.cc) gives the result of one queue:
// every event, draw and sample the same, with and without the window, pauses (a 1 MB buffer,
// checked below) and victims; 2 and 3 partitions over 3 leaves (3 is slow on 2 cores: the
// partitions meet every simulated microsecond, and one of them is always off the core).
TEST(Simulation, PartitionsChangeNoResult) {
  SimConfig base = Small(0, 7);
  base.workload.servers = 16;
  base.workload.trainers = 64;  // with the victims: 84 hosts, 3 leaves
  base.workload.victim_servers = 2;
  base.workload.victim_clients = 2;
  base.fabric.buffer_bytes = 1 << 20;
  // 3 ms: any divergence between partitions shows in the first events it moves; 2 ms left too
  // few victim fetches for the check below.
  base.duration_ns = 3 * kMillisecond;
  for (uint64_t window : {uint64_t(0), uint64_t(4096)}) {
    SimConfig one = base;
    one.engine.window_bytes = window;
    SimResult reference = Sorted(RunSimulation(one));
    EXPECT_EQ(reference.partitions, 1u);
    EXPECT_GT(reference.stats.push_latency_ns.size(), 1000u);
    EXPECT_GT(reference.stats.victim_fetch_latency_ns.size(), 50u);
    if (window == 0) {
      EXPECT_GT(reference.pfc_xoff, 0u);
    }
    for (uint32_t threads : {2u, 3u}) {
      SimConfig split = one;
      split.threads = threads;
      SimResult r = Sorted(RunSimulation(split));
      EXPECT_EQ(r.partitions, threads);
      ExpectSameResult(reference, r);
    }
  }
  // At most one partition per leaf.
  SimConfig many = base;
  many.threads = 8;
  many.duration_ns = 100 * kMicrosecond;
  EXPECT_EQ(RunSimulation(many).partitions, 3u);
  // TCP is not partitioned.
  SimConfig tcp = base;
  tcp.transport = TransportKind::kTcp;
  tcp.threads = 2;
  EXPECT_EQ(RunSimulation(tcp).partitions, 1u);
}

TEST(Simulation, WindowLowersPeakQueueAndBoundsOutstanding) {
  SimResult off = RunSimulation(Small(0));
  SimResult on = RunSimulation(Small(4096));
  ASSERT_GT(off.stats.push_latency_ns.size(), 1000u);
  ASSERT_GT(on.stats.push_latency_ns.size(), 1000u);
  EXPECT_LT(on.stats.peak_buffer_bytes, off.stats.peak_buffer_bytes);
  // The production SendWindow held every engine to W, except that one request larger than W goes
  // alone: an eager SEND of up to 16 KiB (fragments are cut to W, eager messages are not).
  EXPECT_LE(on.stats.max_outstanding_bytes, 16u << 10);
  EXPECT_GT(off.stats.max_outstanding_bytes, 4096u);
  EXPECT_GT(on.stats.window_stalls, 0u);
}

TEST(Simulation, TcpBaselineRuns) {
  SimConfig c = Small(0);
  c.transport = TransportKind::kTcp;
  SimResult r = RunSimulation(c);
  EXPECT_GT(r.stats.push_latency_ns.size(), 1000u);
  EXPECT_EQ(r.pfc_xoff, 0u);  // lossy class: no PFC
  // The per-message host cost is paid on both sides.
  EXPECT_GT(r.push_p50_us, 2 * double(c.tcp.host_cost_ns) / 1000);
}

TEST(Simulation, LognormalSizesHaveThePapersMeanAndP99) {
  LognormalSize sizes(20000, 50000);
  Random rng(11);
  std::vector<uint32_t> v(200000);
  double sum = 0;
  for (uint32_t& x : v) {
    x = sizes.Sample(rng);
    sum += x;
  }
  std::nth_element(v.begin(), v.begin() + v.size() * 99 / 100, v.end());
  EXPECT_NEAR(sum / double(v.size()), 20000, 200);
  EXPECT_NEAR(double(v[v.size() * 99 / 100]), 50000, 1500);
}

}  // namespace
}  // namespace bx::sim
