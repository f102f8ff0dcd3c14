// Congestion spreading: victim flows that never go to the incast's servers
// still wait when PFC pauses the links they share with the incast, and the send window removes
// that. docs/SIMULATION.md, "Congestion spreading", has the numbers.
#include <gtest/gtest.h>

#include "sim/simulation.h"

namespace bx::sim {
namespace {

// Ten racks of 8 hosts under 2 spines (1:1): 16 servers x 48 trainers, bandwidth-bound as at paper
// scale (48 x 20 KB per server per 100 us of compute), plus 4 cold servers and 8 victim clients
// spread over the racks. A 2 MB switch buffer makes the incast pause; 8 MB holds it without a
// pause (the control).
SimConfig Fabric(uint64_t window, bool incast, uint64_t buffer_bytes = 2u << 20) {
  SimConfig c;
  c.fabric.hosts_per_leaf = 8;
  c.fabric.spines = 2;
  c.fabric.buffer_bytes = buffer_bytes;
  c.workload.servers = 16;
  c.workload.trainers = 48;
  c.workload.compute_ns = 100 * kMicrosecond;
  c.workload.incast = incast;
  c.workload.victim_servers = 4;
  c.workload.victim_clients = 8;
  c.workload.victim_interval_ns = 100 * kMicrosecond;
  c.engine.window_bytes = window;
  c.duration_ns = 10 * kMillisecond;
  return c;
}

struct VictimRuns {
  SimResult idle;    // victims alone, same window
  SimResult loaded;  // victims beside the incast
};

VictimRuns RunBoth(uint64_t window, uint64_t buffer_bytes = 2u << 20) {
  return {RunSimulation(Fabric(window, false, buffer_bytes)),
          RunSimulation(Fabric(window, true, buffer_bytes))};
}

void ExpectEnoughSamples(const SimResult& r) {
  EXPECT_GT(r.stats.victim_push_latency_ns.size(), 700u);
  EXPECT_GT(r.stats.victim_fetch_latency_ns.size(), 700u);
}

// Victim P99 beside the incast at most `factor` x victim P99 alone (pushes and fetches).
void ExpectVictimsNear(const VictimRuns& v, double factor) {
  EXPECT_LT(v.loaded.victim_push_p99_us, factor * v.idle.victim_push_p99_us);
  EXPECT_LT(v.loaded.victim_fetch_p99_us, factor * v.idle.victim_fetch_p99_us);
}

TEST(Victims, PausesSpreadToFlowsThatAvoidTheCongestedServers) {
  // Measured: 4,135 XOFF; victim push P99 150.3 us against 33.8 alone (4.4x), fetch 193.0
  // against 53.7 (3.6x).
  VictimRuns off = RunBoth(0);
  ExpectEnoughSamples(off.loaded);
  EXPECT_EQ(off.idle.pfc_xoff, 0u);
  EXPECT_GT(off.loaded.pfc_xoff, 1000u);
  EXPECT_GT(off.loaded.victim_push_p99_us, 2.5 * off.idle.victim_push_p99_us);
  EXPECT_GT(off.loaded.victim_fetch_p99_us, 2.0 * off.idle.victim_fetch_p99_us);
}

TEST(Victims, WithoutPausesTheSameIncastLeavesVictimsAlone) {
  // The control: the same load with a buffer that never pauses. Measured: 0 XOFF, victim push
  // P99 35.9 us (33.8 alone), fetch 55.3 (53.7): the delay above comes from the pauses, not
  // from sharing queues with the incast.
  VictimRuns control = RunBoth(0, 8u << 20);
  ExpectEnoughSamples(control.loaded);
  EXPECT_EQ(control.loaded.pfc_xoff, 0u);
  ExpectVictimsNear(control, 1.3);
}

TEST(Victims, WindowRemovesPausesAndTheirSpreading) {
  // Measured with W = 4096: 1 XOFF (4,135 without the window); victim push P99 153.4 us against
  // 163.6 alone with the same window, fetch 216.7 against 215.4. The window has its own cost
  // (docs/SIMULATION.md): alone, victims take 59.7 us at P50 with it, 20.4 without.
  VictimRuns on = RunBoth(4096);
  ExpectEnoughSamples(on.loaded);
  EXPECT_LT(on.loaded.pfc_xoff, 40u);
  ExpectVictimsNear(on, 1.3);
}

}  // namespace
}  // namespace bx::sim
