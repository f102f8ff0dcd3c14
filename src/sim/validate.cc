#include "sim/validate.h"

#include <algorithm>
#include <string>

#include "base/percentile.h"
#include "sim/dispatch.h"
#include "sim/endpoint_map.h"
#include "sim/event_queue.h"
#include "sim/messages.h"
#include "sim/network.h"
#include "sim/random.h"
#include "sim/stats.h"
#include "sim/tcp_stack.h"

namespace bx::sim {
namespace {

// Hands the flows to TCP at their start times and records when each reaches the receiver.
class FlowDriver : public MessageSink {
 public:
  FlowDriver(const IncastScenario& s, EventQueue* events, MessageTable* messages,
             IncastResult* result)
      : scenario_(s), events_(events), messages_(messages), result_(result) {
    uint32_t flows = s.senders + s.background;
    for (uint32_t i = 0; i < flows; ++i) {
      FlowResult f;
      f.background = i >= s.senders;
      f.bytes = f.background ? s.background_bytes : s.bytes;
      result->flows.push_back(f);
      uint32_t host = s.receivers + i;
      events->SetActor(host);
      events->Schedule(f.background ? 0 : s.start_ns, host, EventKind::kWorkload, i);
    }
    started_.resize(flows);
  }
  void SetTransport(Transport* t) { transport_ = t; }
  bool done() const { return done_ == result_->flows.size(); }

  // Flow i leaves host receivers + i (the receivers are the "servers").
  void Start(uint32_t i) {
    started_[i] = events_->now();
    transport_->Send(scenario_.receivers + i, ReceiverOf(scenario_, i), MessageKind::kPush,
                     uint32_t(result_->flows[i].bytes), events_->now());
  }
  void OnDelivered(const Delivery& d) override {
    uint32_t i = d.from - scenario_.receivers;
    result_->flows[i].fct_us = double(events_->now() - started_[i]) / 1000.0;
    ++done_;
    messages_->ReleaseDelivered(d.message);
  }
  void OnSendCompleted(uint32_t id) override { messages_->Release(id); }

 private:
  const IncastScenario& scenario_;
  EventQueue* events_;
  MessageTable* messages_;
  IncastResult* result_;
  Transport* transport_ = nullptr;
  std::vector<TimeNs> started_;
  size_t done_ = 0;
};

}  // namespace

std::vector<IncastScenario> ValidationScenarios() {
  std::vector<IncastScenario> v;
  IncastScenario s;
  s.name = "incast-4x256K";
  s.description = "4 -> 1, 256 KB each, ECN step at K = 100 KB";
  v.push_back(s);

  s.name = "incast-16x1M";
  s.description = "16 -> 1, 1 MB each, ECN step at K = 100 KB";
  s.senders = 16;
  s.bytes = 1 << 20;
  v.push_back(s);

  s.name = "incast-16x1M-red";
  s.description = "16 -> 1, 1 MB each, RED 100-400 KB, Pmax 0.2 (bx sim defaults)";
  s.ecn_kmax_bytes = 400000;
  v.push_back(s);

  s = IncastScenario{};
  s.name = "incast-32x64K";
  s.description = "32 -> 1, 64 KB each (shorter than slow start), ECN step at 100 KB";
  s.senders = 32;
  s.bytes = 64 << 10;
  v.push_back(s);

  s = IncastScenario{};
  s.name = "leafspine-16x256K";
  s.description = "2 leaves under a 100G spine; 16 -> 1 of 256 KB, 8 of them across the spine";
  s.senders = 16;
  s.leaves = 2;
  v.push_back(s);

  s = IncastScenario{};
  s.name = "background+incast-8x128K";
  s.description = "one 8 MB flow from 0, then 8 -> 1 of 128 KB at 200 us, step at 100 KB";
  s.senders = 8;
  s.bytes = 128 << 10;
  s.start_ns = 200 * kMicrosecond;
  s.background = 1;
  s.background_bytes = 8 << 20;
  v.push_back(s);

  s = IncastScenario{};
  s.name = "ecmp-8x1M";
  s.description =
      "2 leaves, 4 spines of 25G; 8 flows of 1 MB, each to a receiver on the other leaf";
  s.senders = 8;
  s.receivers = 8;
  s.bytes = 1 << 20;
  s.leaves = 2;
  s.spines = 4;
  s.uplink_gbps = 25;
  v.push_back(s);

  s.name = "ecmp-incast-16x256K";
  s.description =
      "2 leaves, 4 spines of 25G; 16 flows of 256 KB into 2 receivers, each on the other leaf";
  s.senders = 16;
  s.receivers = 2;
  s.bytes = 256 << 10;
  v.push_back(s);
  return v;
}

uint32_t ReceiverOf(const IncastScenario& s, uint32_t flow) {
  return s.receivers > 1 ? (flow + 1) % s.receivers : 0;
}

std::vector<EcmpPath> EcmpPaths(const IncastScenario& s) {
  WorkloadConfig w;
  w.servers = s.receivers;
  w.trainers = s.senders + s.background;
  EndpointMap map(w);
  std::vector<EcmpPath> paths;
  for (uint32_t i = 0; i < w.trainers; ++i) {
    uint32_t from = s.receivers + i, to = ReceiverOf(s, i);
    uint32_t flow = map.EndpointFor(from, to);  // TCP's data and ACKs carry the sender's
    paths.push_back({Network::EcmpSpine(flow, from, to, s.spines),
                     Network::EcmpSpine(flow, to, from, s.spines)});
  }
  return paths;
}

IncastResult RunIncastScenario(const IncastScenario& s, uint64_t seed) {
  IncastResult result;
  SimConfig config;
  config.transport = TransportKind::kTcp;
  uint32_t hosts = s.receivers + s.senders + s.background;
  FabricConfig& fabric = config.fabric;
  // One leaf is a single switch (no spine); otherwise leaves under s.spines spines.
  fabric.hosts_per_leaf = (hosts + s.leaves - 1) / s.leaves;
  fabric.spines = s.spines;
  fabric.uplink_gbps = s.uplink_gbps;
  fabric.host_gbps = s.gbps;
  fabric.link_delay_ns = s.link_delay_ns;
  SetRedAtRate(fabric, s.gbps, s.ecn_kmin_bytes, s.ecn_kmax_bytes, s.ecn_pmax);
  fabric.ecn_at_enqueue = s.ecn_at_enqueue;
  fabric.tcp_acks_with_data = s.tcp_acks_with_data;
  config.workload.servers = s.receivers;
  config.workload.trainers = hosts - s.receivers;
  config.tcp.host_cost_ns = 0;  // ns-3 has none either
  config.tcp.grow_only_when_cwnd_limited = s.tcp_cwnd_limited;

  EventQueue events;
  Stats stats;
  MessageTable messages;
  Network network(fabric, hosts, &events, seed * 2 + 1, &stats);
  TcpStack tcp(config, &network, &events, &messages, &stats);
  FlowDriver driver(s, &events, &messages, &result);
  tcp.SetSink(&driver);
  network.SetHostStack(&tcp);
  driver.SetTransport(&tcp);

  // The loop is RunSimulation's, plus queue samples between events until every flow is done.
  uint64_t queue_sum = 0;
  TimeNs next_sample = 0;
  const TimeNs give_up = 1 * kSecond;
  while (!events.empty() && !driver.done() && events.NextTime() <= give_up) {
    while (next_sample <= events.NextTime()) {
      uint64_t q = s.spines > 1 ? network.UplinkQueueBytes(0) : network.EgressQueueBytes(0);
      queue_sum += q;
      result.queue_max_bytes = std::max(result.queue_max_bytes, q);
      ++result.queue_samples;
      next_sample += s.sample_ns;
    }
    Event e = events.Pop();
    DispatchEvent(e, network, &tcp, [&](const Event& w) { driver.Start(w.a); });
  }
  result.complete = driver.done();
  result.queue_mean_bytes =
      result.queue_samples ? double(queue_sum) / double(result.queue_samples) : 0;
  result.ecn_marks = stats.ecn_marks;
  result.drops = stats.drops;
  return result;
}

std::vector<std::string> Ns3Arguments(const IncastScenario& s, bool even_paths) {
  auto arg = [](const char* name, auto value) {
    return std::string("--") + name + "=" + std::to_string(value);
  };
  std::vector<std::string> args = {arg("senders", s.senders),
                                   arg("receivers", s.receivers),
                                   arg("spines", s.spines),
                                   arg("bytes", s.bytes),
                                   arg("start_us", double(s.start_ns) / 1000.0),
                                   arg("background", s.background),
                                   arg("background_bytes", s.background_bytes),
                                   arg("gbps", s.gbps),
                                   arg("leaves", s.leaves),
                                   arg("uplink_gbps", s.uplink_gbps),
                                   arg("delay_us", double(s.link_delay_ns) / 1000.0),
                                   arg("kmin", s.ecn_kmin_bytes),
                                   arg("kmax", s.ecn_kmax_bytes),
                                   arg("pmax", s.ecn_pmax),
                                   arg("sample_us", double(s.sample_ns) / 1000.0)};
  if (s.spines > 1) {
    // "data:ack" spines per flow, comma-separated.
    std::string paths;
    std::vector<EcmpPath> ours = EcmpPaths(s);
    std::vector<uint32_t> dealt(s.leaves);  // even paths: flows so far from each leaf
    for (uint32_t i = 0; i < ours.size(); ++i) {
      EcmpPath p = ours[i];
      if (even_paths) {
        uint32_t spine = dealt[(s.receivers + i) % s.leaves]++ % s.spines;
        p = EcmpPath{spine, spine};
      }
      // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false positive) on
      // "literal" + std::string&&.
      if (i > 0) paths += ',';
      paths += std::to_string(p.data_spine);
      paths += ':';
      paths += std::to_string(p.ack_spine);
    }
    args.push_back("--paths=" + paths);
  }
  return args;
}

double FctPercentile(const IncastResult& result, double q) {
  std::vector<double> fcts;
  for (const FlowResult& f : result.flows) {
    if (f.fct_us >= 0) fcts.push_back(f.fct_us);
  }
  return fcts.empty() ? 0 : Percentile(fcts, q);
}

}  // namespace bx::sim
