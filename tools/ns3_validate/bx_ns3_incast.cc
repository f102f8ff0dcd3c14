// bx_ns3_incast: the cross-validation scenarios of `bx sim validate` (issue 21) in ns-3 3.37.
// N senders -> one switch (or two-tier: leaves under one spine) -> one receiver; DCTCP at the
// senders; RED with ECN marking on every switch port. Flow i starts at
// start_us (background flows at 0) and sends `bytes`. Prints JSON: per-flow FCT (from the
// connection being established to the last byte at the receiver, so the handshake, which our
// simulator does not model, is left out) and the bottleneck queue sampled every sample_us.
//
// Built only when ns-3 is installed (tools/ns3_validate/CMakeLists.txt); never linked into
// bexpress. Parameters mirror bx::sim::IncastScenario (src/sim/validate.h).
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

using namespace ns3;

namespace {

struct Flow {
  uint64_t bytes = 0;
  double start_us = 0;
  uint64_t sent = 0, received = 0;
  Time established, done;
  Ptr<Socket> socket;
};

std::vector<Flow> g_flows;
std::map<Ipv4Address, size_t> g_flow_of;  // sender address -> flow (one flow per sender)
size_t g_done = 0;
Ptr<QueueDisc> g_red;
Ptr<Queue<Packet>> g_device_queue;
double g_sample_us = 1;
uint64_t g_queue_sum = 0, g_queue_max = 0, g_samples = 0;

// Keeps the socket's send buffer full until the flow's bytes are all handed over.
void Fill(Ptr<Socket> socket, uint32_t) {
  for (Flow& f : g_flows) {
    if (f.socket != socket) continue;
    while (f.sent < f.bytes) {
      uint32_t room = socket->GetTxAvailable();
      if (room == 0) return;
      uint32_t n = uint32_t(std::min<uint64_t>(room, f.bytes - f.sent));
      int sent = socket->Send(Create<Packet>(n));
      if (sent <= 0) return;
      f.sent += uint64_t(sent);
    }
    return;
  }
}

void Connected(Ptr<Socket> socket) {
  for (Flow& f : g_flows) {
    if (f.socket == socket) f.established = Simulator::Now();
  }
  Fill(socket, 0);
}

void Start(size_t i, Ptr<Node> node, Address to) {
  Flow& f = g_flows[i];
  f.socket = Socket::CreateSocket(node, TcpSocketFactory::GetTypeId());
  f.socket->Bind();
  f.socket->SetConnectCallback(MakeCallback(&Connected), MakeNullCallback<void, Ptr<Socket>>());
  f.socket->SetSendCallback(MakeCallback(&Fill));
  f.socket->Connect(to);
}

void Received(Ptr<const Packet> packet, const Address& from) {
  auto it = g_flow_of.find(InetSocketAddress::ConvertFrom(from).GetIpv4());
  if (it == g_flow_of.end()) return;
  Flow& f = g_flows[it->second];
  f.received += packet->GetSize();
  if (f.received >= f.bytes && f.done.IsZero()) {
    f.done = Simulator::Now();
    if (++g_done == g_flows.size()) Simulator::Stop();
  }
}

// The bottleneck's queue: RED's bytes plus the device's transmit queue (one packet deep).
void Sample() {
  uint64_t bytes = g_red->GetNBytes() + g_device_queue->GetNBytes();
  g_queue_sum += bytes;
  g_queue_max = std::max(g_queue_max, bytes);
  ++g_samples;
  Simulator::Schedule(MicroSeconds(g_sample_us), &Sample);
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t senders = 4, background = 0, leaves = 1;
  double uplink_gbps = 100;
  uint64_t bytes = 256 << 10, background_bytes = 0;
  double start_us = 0, gbps = 25, delay_us = 1, pmax = 0.2, stop_ms = 1000;
  uint64_t kmin = 100000, kmax = 100000;
  uint32_t mss = 4096, initial_window = 10;
  double min_rto_us = 1000, dctcp_g = 1.0 / 16;

  CommandLine cmd;
  cmd.AddValue("senders", "incast senders", senders);
  cmd.AddValue("bytes", "bytes per incast flow", bytes);
  cmd.AddValue("start_us", "when the incast flows start", start_us);
  cmd.AddValue("background", "background senders (start at 0)", background);
  cmd.AddValue("background_bytes", "bytes per background flow", background_bytes);
  cmd.AddValue("gbps", "host links' rate", gbps);
  cmd.AddValue("leaves", "leaf switches (more than 1: one spine above them)", leaves);
  cmd.AddValue("uplink_gbps", "leaf-spine links' rate", uplink_gbps);
  cmd.AddValue("delay_us", "every link's delay", delay_us);
  cmd.AddValue("kmin", "RED MinTh, bytes", kmin);
  cmd.AddValue("kmax", "RED MaxTh, bytes", kmax);
  cmd.AddValue("pmax", "RED marking probability at MaxTh", pmax);
  cmd.AddValue("mss", "TCP segment size", mss);
  cmd.AddValue("initial_window", "TCP initial window, segments", initial_window);
  cmd.AddValue("min_rto_us", "TCP minimum RTO", min_rto_us);
  cmd.AddValue("dctcp_g", "DCTCP alpha gain", dctcp_g);
  cmd.AddValue("sample_us", "queue sampling interval", g_sample_us);
  cmd.AddValue("stop_ms", "give up after this much simulated time", stop_ms);
  cmd.Parse(argc, argv);

  // TCP as our simulator models it: DCTCP, an ACK per segment, no SACK or timestamps, buffers
  // large enough never to limit the window.
  Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpDctcp::GetTypeId()));
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(mss));
  Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(initial_window));
  Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(1));
  Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(64u << 20));
  Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(64u << 20));
  Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MicroSeconds(min_rto_us)));
  Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(1)));
  Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(false));
  Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
  Config::SetDefault("ns3::TcpDctcp::DctcpShiftG", DoubleValue(dctcp_g));
  Config::SetDefault("ns3::TcpDctcp::DctcpAlphaOnInit", DoubleValue(1.0));

  // RED on instantaneous bytes (QW = 1), marking instead of dropping; kmin == kmax is DCTCP's
  // step marking at K.
  Config::SetDefault("ns3::RedQueueDisc::MaxSize", QueueSizeValue(QueueSize("64MB")));
  Config::SetDefault("ns3::RedQueueDisc::MeanPktSize", UintegerValue(mss + 42));
  Config::SetDefault("ns3::RedQueueDisc::QW", DoubleValue(1.0));
  Config::SetDefault("ns3::RedQueueDisc::LInterm", DoubleValue(1.0 / pmax));
  Config::SetDefault("ns3::RedQueueDisc::Gentle", BooleanValue(false));
  Config::SetDefault("ns3::RedQueueDisc::UseEcn", BooleanValue(true));
  Config::SetDefault("ns3::RedQueueDisc::UseHardDrop", BooleanValue(false));

  uint32_t hosts = senders + background;
  // Host h (0 = receiver, i + 1 = flow i's sender) hangs off leaf h % leaves, as our Network
  // places hosts; with more than one leaf, every leaf has one uplink to a single spine.
  NodeContainer leaf, spine, receiver, sources;
  leaf.Create(leaves);
  if (leaves > 1) spine.Create(1);
  receiver.Create(1);
  sources.Create(hosts);
  InternetStackHelper stack;
  stack.InstallAll();

  PointToPointHelper link;
  link.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(gbps * 1e9))));
  link.SetDeviceAttribute("Mtu", UintegerValue(9000));
  link.SetChannelAttribute("Delay", TimeValue(NanoSeconds(uint64_t(delay_us * 1000))));
  // A one-packet device queue, so the queue builds in the queue discs, where RED sees it.
  link.SetQueue("ns3::DropTailQueue", "MaxSize", QueueSizeValue(QueueSize("1p")));

  TrafficControlHelper fifo;
  fifo.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", QueueSizeValue(QueueSize("64MB")));
  // RED on a switch port of `rate` Gb/s: thresholds scale with the rate, as ours do.
  auto red = [&](double rate) {
    TrafficControlHelper h;
    double scale = rate / gbps;
    h.SetRootQueueDisc(
        "ns3::RedQueueDisc", "LinkBandwidth", DataRateValue(DataRate(uint64_t(rate * 1e9))),
        "LinkDelay", TimeValue(NanoSeconds(uint64_t(delay_us * 1000))), "MinTh",
        DoubleValue(double(kmin) * scale), "MaxTh", DoubleValue(double(kmax) * scale));
    return h;
  };

  Ipv4AddressHelper addresses;
  addresses.SetBase("10.0.0.0", "255.255.255.0");
  NetDeviceContainer bottleneck = link.Install(leaf.Get(0), receiver.Get(0));
  g_red = red(gbps).Install(bottleneck.Get(0)).Get(0);
  fifo.Install(bottleneck.Get(1));
  Ipv4InterfaceContainer receiver_if = addresses.Assign(bottleneck);
  g_device_queue = DynamicCast<PointToPointNetDevice>(bottleneck.Get(0))->GetQueue();

  for (uint32_t i = 0; i < hosts; ++i) {
    addresses.NewNetwork();
    NetDeviceContainer d = link.Install(sources.Get(i), leaf.Get((i + 1) % leaves));
    fifo.Install(d.Get(0));
    red(gbps).Install(d.Get(1));
    Ipv4InterfaceContainer ifs = addresses.Assign(d);
    g_flow_of[ifs.GetAddress(0)] = i;
    Flow f;
    bool is_background = i >= senders;
    f.bytes = is_background ? background_bytes : bytes;
    f.start_us = is_background ? 0 : start_us;
    g_flows.push_back(f);
  }
  if (leaves > 1) {
    PointToPointHelper up = link;
    up.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(uplink_gbps * 1e9))));
    for (uint32_t l = 0; l < leaves; ++l) {
      addresses.NewNetwork();
      NetDeviceContainer d = up.Install(leaf.Get(l), spine.Get(0));
      red(uplink_gbps).Install(d);
      addresses.Assign(d);
    }
  }
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();

  uint16_t port = 5000;
  PacketSinkHelper sink("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
  ApplicationContainer sinks = sink.Install(receiver.Get(0));
  sinks.Start(Seconds(0));
  sinks.Get(0)->TraceConnectWithoutContext("Rx", MakeCallback(&Received));

  Address to = InetSocketAddress(receiver_if.GetAddress(1), port);
  for (size_t i = 0; i < g_flows.size(); ++i) {
    Simulator::Schedule(MicroSeconds(g_flows[i].start_us), &Start, i, sources.Get(uint32_t(i)), to);
  }
  Simulator::Schedule(Seconds(0), &Sample);
  Simulator::Stop(MilliSeconds(stop_ms));
  Simulator::Run();

  auto stats = g_red->GetStats();
  std::printf("{\"simulator\": \"ns-3 %s\", \"flows\": [", "3.37");
  for (size_t i = 0; i < g_flows.size(); ++i) {
    const Flow& f = g_flows[i];
    double fct = f.done.IsZero() ? -1 : (f.done - f.established).GetSeconds() * 1e6;
    std::printf("%s{\"bytes\": %llu, \"background\": %s, \"start_us\": %.3f, \"fct_us\": %.3f}",
                i ? ", " : "", (unsigned long long)f.bytes, i >= senders ? "true" : "false",
                f.established.GetSeconds() * 1e6, fct);
  }
  std::printf(
      "], \"complete\": %s, \"queue_mean_bytes\": %.1f, \"queue_max_bytes\": %llu, "
      "\"queue_samples\": %llu, \"ecn_marks\": %llu, \"drops\": %llu}\n",
      g_done == g_flows.size() ? "true" : "false",
      g_samples ? double(g_queue_sum) / double(g_samples) : 0.0, (unsigned long long)g_queue_max,
      (unsigned long long)g_samples,
      (unsigned long long)(stats.GetNMarkedPackets(RedQueueDisc::UNFORCED_MARK) +
                           stats.GetNMarkedPackets(RedQueueDisc::FORCED_MARK)),
      (unsigned long long)stats.nTotalDroppedPackets);
  Simulator::Destroy();
  return g_done == g_flows.size() ? 0 : 1;
}
