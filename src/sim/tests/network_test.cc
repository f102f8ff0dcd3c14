// The fabric against hand-computed cases: one flow's latency and rate, two flows' fair share,
// an incast's PFC XOFF and XON.
#include "sim/network.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "sim/dispatch.h"

namespace bx::sim {
namespace {

constexpr uint32_t kWire = 4160;  // 4096 payload + 64 header

// Each listed sender streams `cells` cells to `receiver` as fast as its port allows.
class StreamStack : public HostStack {
 public:
  StreamStack(Network* net, std::map<uint32_t, uint32_t> cells, uint32_t receiver)
      : net_(net), remaining_(std::move(cells)), receiver_(receiver) {}
  uint32_t NextDataPacket(uint32_t host, TimeNs, TimeNs*) override {
    auto it = remaining_.find(host);
    if (it == remaining_.end() || it->second == 0) return kNoPacket;
    --it->second;
    uint32_t id = net_->packets().Allocate();
    Packet& p = net_->packets()[id];
    p.type = PacketType::kRdmaData;
    p.wire_bytes = kWire;
    p.src_host = host;
    p.dst_host = receiver_;
    p.flow = host;
    return id;
  }
  bool HasData(uint32_t host) const override {
    auto it = remaining_.find(host);
    return it != remaining_.end() && it->second > 0;
  }
  void OnPacket(uint32_t, uint32_t id) override {
    arrivals.push_back({net_->packets()[id].src_host, now_()});
    net_->packets().Free(id);
  }
  std::function<TimeNs()> now_;
  std::vector<std::pair<uint32_t, TimeNs>> arrivals;

 private:
  Network* net_;
  std::map<uint32_t, uint32_t> remaining_;
  uint32_t receiver_;
};

struct Bench {
  explicit Bench(FabricConfig config, uint32_t hosts, std::map<uint32_t, uint32_t> cells,
                 uint32_t receiver)
      : net(config, hosts, &events, 7, &stats), stack(&net, std::move(cells), receiver) {
    stack.now_ = [this] { return events.now(); };
    net.SetHostStack(&stack);
  }
  void Run(TimeNs until) {
    while (!events.empty() && events.NextTime() <= until) {
      // No host stack timers and no workload here: the fabric's events only.
      DispatchEvent(events.Pop(), net, nullptr, [](const Event&) {});
    }
    net.Finish(events.now());
  }
  EventQueue events;
  Stats stats;
  Network net;
  StreamStack stack;
};

// 4160 B at 25 Gb/s = 1331.2 ns, rounded up; at 100 Gb/s 332.8 ns.
constexpr TimeNs kHostCell = 1332;
constexpr TimeNs kUplinkCell = 333;

TEST(Network, SingleFlowSameLeafLatencyAndLineRate) {
  FabricConfig config;
  Bench bench(config, 2, {{0, 1000}}, 1);
  bench.net.Kick(0);
  bench.Run(10 * kMillisecond);
  ASSERT_EQ(bench.stack.arrivals.size(), 1000u);
  // Host serialisation + link + switch serialisation + link (store and forward).
  EXPECT_EQ(bench.stack.arrivals[0].second, kHostCell + 1000 + kHostCell + 1000);
  TimeNs span = bench.stack.arrivals.back().second - bench.stack.arrivals.front().second;
  double gbps = 999.0 * kWire * 8 / double(span);
  EXPECT_NEAR(gbps, 25.0, 0.05);
  EXPECT_EQ(bench.stats.pfc_xoff[0] + bench.stats.pfc_xoff[1] + bench.stats.pfc_xoff[2], 0u);
}

TEST(Network, SingleFlowAcrossSpine) {
  FabricConfig config;
  config.hosts_per_leaf = 1;
  config.spines = 1;
  Bench bench(config, 2, {{0, 10}}, 1);
  bench.net.Kick(0);
  bench.Run(kMillisecond);
  ASSERT_EQ(bench.stack.arrivals.size(), 10u);
  // host -> leaf (25G), leaf -> spine (100G), spine -> leaf (100G), leaf -> host (25G).
  EXPECT_EQ(bench.stack.arrivals[0].second, 2 * kHostCell + 2 * kUplinkCell + 4 * 1000);
}

TEST(Network, TwoFlowsShareALinkFairly) {
  FabricConfig config;
  Bench bench(config, 3, {{0, 100000}, {1, 100000}}, 2);
  bench.net.Kick(0);
  bench.net.Kick(1);
  bench.Run(2 * kMillisecond);
  std::map<uint32_t, uint64_t> cells;
  for (auto [src, at] : bench.stack.arrivals) ++cells[src];
  uint64_t total = cells[0] + cells[1];
  // The receiver's link is the bottleneck: full rate in total, half each.
  double gbps = double(total) * kWire * 8 / double(2 * kMillisecond);
  EXPECT_NEAR(gbps, 25.0, 0.2);
  EXPECT_NEAR(double(cells[0]) / double(total), 0.5, 0.01);
}

TEST(Network, IncastPausesAtTheComputedOccupancyThenResumes) {
  FabricConfig config;
  config.hosts_per_leaf = 4;
  config.buffer_bytes = 1000000;
  // Three senders into one receiver: three ingress queues grow at equal rates. With shared use s
  // on each, a queue pauses when s >= (B' - 3s) / 8, i.e. s = B' / 11, where
  // B' = 1,000,000 - 4 x 17,695 (headroom: 3 x 25 Gb/s x 1 us + 2 cells) - 4 x 4,096 (reserve)
  // = 912,836.
  const double expected = 912836.0 / 11;
  Bench bench(config, 4, {{0, 200}, {1, 200}, {2, 200}}, 3);
  for (uint32_t h = 0; h < 3; ++h) bench.net.Kick(h);
  bench.Run(50 * kMillisecond);
  uint64_t xoff = bench.stats.pfc_xoff[size_t(PauseTier::kLeafToHost)];
  EXPECT_GE(xoff, 1u);
  EXPECT_NEAR(double(bench.stats.first_xoff_occupancy), expected, 2.0 * kWire);
  // Every cell arrives: pauses were lifted (XON) and nothing was dropped.
  EXPECT_EQ(bench.stack.arrivals.size(), 600u);
  EXPECT_GT(bench.stats.paused_ns[size_t(PauseTier::kLeafToHost)], 0);
  EXPECT_EQ(bench.stats.headroom_overflow_bytes, 0u);
  EXPECT_EQ(bench.stats.drops, 0u);
}

}  // namespace
}  // namespace bx::sim
