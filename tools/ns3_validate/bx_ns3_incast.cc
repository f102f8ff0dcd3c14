// bx_ns3_incast: the cross-validation scenarios of `bx sim validate` in ns-3 3.37.
// N senders -> one switch (or two-tier: leaves under one or more spines) -> one receiver, or
// several; DCTCP at the senders; RED with ECN marking on every switch port. Flow i starts at
// start_us (background flows at 0) and sends `bytes`. Prints JSON: per-flow FCT (from the
// connection being established to the last byte at the receiver, so the handshake, which our
// simulator does not model, is left out) and the bottleneck queue sampled every sample_us.
//
// Several spines: ns-3 3.37's global routing spreads equal-cost routes per packet or not at all,
// so each flow's path is given (--paths, from our ECMP hash) and pinned with static routes. Spine
// k's "plane" is 10.(100 + k).0.0/16, and a leaf routes it through spine k. Every receiver has an
// extra address in each plane, and a flow connects to the one in its data spine's plane. Its
// ACKs go to the sender's own address, which is taken from its ACK spine's plane (ns-3's TCP
// takes its source address from the route, whatever the socket was bound to).
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
// The queue sampled: receiver 0's port, or leaf 0's uplinks together with several spines.
std::vector<Ptr<QueueDisc>> g_reds;
std::vector<Ptr<Queue<Packet>>> g_device_queues;
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

// The bottleneck's queue: RED's bytes plus the devices' transmit queues (one packet deep).
void Sample() {
  uint64_t bytes = 0;
  for (const auto& red : g_reds) bytes += red->GetNBytes();
  for (const auto& queue : g_device_queues) bytes += queue->GetNBytes();
  g_queue_sum += bytes;
  g_queue_max = std::max(g_queue_max, bytes);
  ++g_samples;
  Simulator::Schedule(MicroSeconds(g_sample_us), &Sample);
}

// Spine k's plane is 10.(100 + k).0.0/16: receiver h is 10.(100 + k).0.(h + 1) in it, and the
// link of the sender whose ACKs take spine k is 10.(100 + k).(128 + its flow).0/24.
Ipv4Address PlaneNetwork(uint32_t spine) {
  return Ipv4Address((10u << 24) | ((100u + spine) << 16));
}
Ipv4Address PlaneAddress(uint32_t spine, uint32_t host) {
  return Ipv4Address(PlaneNetwork(spine).Get() + host + 1);
}

// A spine number below `spines`, or a fatal error naming the bad item.
uint32_t ParseSpine(const std::string& text, uint32_t spines, const std::string& item) {
  size_t used = 0;
  unsigned long spine = spines;
  try {
    spine = std::stoul(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || spine >= spines) {
    NS_FATAL_ERROR("--paths: " << item << ": expected data:ack spines below " << spines);
  }
  return uint32_t(spine);
}

// "d:a,d:a,...": each flow's data and ACK spines.
std::vector<std::pair<uint32_t, uint32_t>> ParsePaths(const std::string& text, uint32_t spines) {
  std::vector<std::pair<uint32_t, uint32_t>> paths;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    size_t colon = item.find(':');
    if (colon == std::string::npos) NS_FATAL_ERROR("--paths: expected data:ack, got " << item);
    paths.emplace_back(ParseSpine(item.substr(0, colon), spines, item),
                       ParseSpine(item.substr(colon + 1), spines, item));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return paths;
}

// The link from a host to its leaf, as installed.
struct HostLink {
  Ptr<Node> host;
  uint32_t leaf;               // index into the leaf switches
  NetDeviceContainer devices;  // host side, leaf side
  Ipv4InterfaceContainer addresses;
};

// Static routes for the plane addressing above (see the top of this file). Hosts are numbered
// receivers first.
void RouteByPlanes(const std::vector<HostLink>& hosts, uint32_t receivers, NodeContainer& leaves,
                   NodeContainer& spine,
                   const std::vector<std::vector<Ipv4InterfaceContainer>>& uplinks,
                   const std::vector<std::vector<NetDeviceContainer>>& uplink_devices) {
  Ipv4StaticRoutingHelper helper;
  uint32_t spines = spine.GetN();
  for (uint32_t h = 0; h < hosts.size(); ++h) {
    const HostLink& link = hosts[h];
    Ptr<Ipv4> ip = link.host->GetObject<Ipv4>();
    uint32_t host_if = ip->GetInterfaceForDevice(link.devices.Get(0));
    helper.GetStaticRouting(ip)->SetDefaultRoute(link.addresses.GetAddress(1), host_if);
    const uint32_t l = link.leaf;
    Ptr<Ipv4> leaf_ip = leaves.Get(l)->GetObject<Ipv4>();
    uint32_t leaf_if = leaf_ip->GetInterfaceForDevice(link.devices.Get(1));
    for (uint32_t k = 0; k < spines; ++k) {
      // Every spine reaches the host through the host's leaf: its plane address (a receiver),
      // or its link (a sender; only its ACK spine will see traffic for it).
      Ptr<Ipv4> spine_ip = spine.Get(k)->GetObject<Ipv4>();
      uint32_t down = spine_ip->GetInterfaceForDevice(uplink_devices[l][k].Get(1));
      Ipv4Address via = uplinks[l][k].GetAddress(0);
      if (h < receivers) {
        ip->AddAddress(host_if, Ipv4InterfaceAddress(PlaneAddress(k, h), "255.255.255.255"));
        helper.GetStaticRouting(leaf_ip)->AddHostRouteTo(PlaneAddress(k, h),
                                                         link.addresses.GetAddress(0), leaf_if);
        helper.GetStaticRouting(spine_ip)->AddHostRouteTo(PlaneAddress(k, h), via, down);
      } else {
        helper.GetStaticRouting(spine_ip)->AddNetworkRouteTo(link.addresses.GetAddress(0),
                                                             Ipv4Mask("255.255.255.0"), via, down);
      }
    }
  }
  // A leaf sends plane k's other addresses up to spine k (host routes are longer, so win).
  for (uint32_t l = 0; l < leaves.GetN(); ++l) {
    Ptr<Ipv4> ip = leaves.Get(l)->GetObject<Ipv4>();
    for (uint32_t k = 0; k < spines; ++k) {
      uint32_t up = ip->GetInterfaceForDevice(uplink_devices[l][k].Get(0));
      helper.GetStaticRouting(ip)->AddNetworkRouteTo(PlaneNetwork(k), Ipv4Mask("255.255.0.0"),
                                                     uplinks[l][k].GetAddress(1), up);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t senders = 4, background = 0, leaves = 1, receivers = 1, spines = 1;
  std::string paths_text;
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
  cmd.AddValue("receivers", "receivers; flow i goes to (i + 1) % receivers", receivers);
  cmd.AddValue("leaves", "leaf switches (more than 1: spines above them)", leaves);
  cmd.AddValue("spines", "spine switches (with more than 1 leaf)", spines);
  cmd.AddValue("paths", "each flow's data:ack spine, comma-separated (several spines)", paths_text);
  cmd.AddValue("uplink_gbps", "each leaf-spine link's rate", uplink_gbps);
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
  if (leaves == 1) spines = 0;
  auto paths = ParsePaths(paths_text, spines);
  if (spines > 1 && paths.size() != hosts) NS_FATAL_ERROR("--paths: need one per flow");
  // The planes' addressing (PlaneAddress) has room for 254 receivers and 128 flows.
  if (spines > 1 && (receivers > 254 || hosts > 128)) {
    NS_FATAL_ERROR("several spines: at most 254 receivers and 128 flows");
  }
  // Host h (receivers first, then flow i's sender as receivers + i) hangs off leaf h % leaves, as
  // our Network places hosts; with more than one leaf, every leaf has one uplink to each spine.
  NodeContainer leaf, spine, receiver, sources;
  leaf.Create(leaves);
  spine.Create(spines);
  receiver.Create(receivers);
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
  std::vector<HostLink> host_links;  // by host number
  for (uint32_t r = 0; r < receivers; ++r) {
    if (r > 0) addresses.NewNetwork();
    HostLink h{receiver.Get(r), r % leaves, {}, {}};
    NetDeviceContainer d = link.Install(leaf.Get(h.leaf), h.host);
    Ptr<QueueDisc> port = red(gbps).Install(d.Get(0)).Get(0);
    fifo.Install(d.Get(1));
    Ipv4InterfaceContainer ifs = addresses.Assign(d);
    if (r == 0 && spines <= 1) {
      g_reds.push_back(port);
      g_device_queues.push_back(DynamicCast<PointToPointNetDevice>(d.Get(0))->GetQueue());
    }
    h.devices.Add(d.Get(1));
    h.devices.Add(d.Get(0));
    h.addresses.Add(ifs.Get(1));
    h.addresses.Add(ifs.Get(0));
    host_links.push_back(h);
  }

  for (uint32_t i = 0; i < hosts; ++i) {
    HostLink h{sources.Get(i), (receivers + i) % leaves, {}, {}};
    NetDeviceContainer d = link.Install(h.host, leaf.Get(h.leaf));
    fifo.Install(d.Get(0));
    red(gbps).Install(d.Get(1));
    Ipv4InterfaceContainer ifs;
    if (spines > 1) {
      Ipv4AddressHelper in_plane;
      in_plane.SetBase(Ipv4Address(PlaneNetwork(paths[i].second).Get() | ((128 + i) << 8)),
                       "255.255.255.0");
      ifs = in_plane.Assign(d);
    } else {
      addresses.NewNetwork();
      ifs = addresses.Assign(d);
    }
    h.devices = d;
    h.addresses = ifs;
    host_links.push_back(h);
    g_flow_of[ifs.GetAddress(0)] = i;
    Flow f;
    bool is_background = i >= senders;
    f.bytes = is_background ? background_bytes : bytes;
    f.start_us = is_background ? 0 : start_us;
    g_flows.push_back(f);
  }
  // uplinks[l][k]: leaf l's link to spine k (leaf side first).
  std::vector<std::vector<NetDeviceContainer>> uplink_devices(leaves);
  std::vector<std::vector<Ipv4InterfaceContainer>> uplinks(leaves);
  PointToPointHelper up = link;
  up.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(uplink_gbps * 1e9))));
  for (uint32_t l = 0; l < leaves; ++l) {
    for (uint32_t k = 0; k < spines; ++k) {
      addresses.NewNetwork();
      NetDeviceContainer d = up.Install(leaf.Get(l), spine.Get(k));
      QueueDiscContainer ports = red(uplink_gbps).Install(d);
      uplinks[l].push_back(addresses.Assign(d));
      uplink_devices[l].push_back(d);
      if (l == 0 && spines > 1) {
        g_reds.push_back(ports.Get(0));
        g_device_queues.push_back(DynamicCast<PointToPointNetDevice>(d.Get(0))->GetQueue());
      }
    }
  }
  if (spines > 1) {
    RouteByPlanes(host_links, receivers, leaf, spine, uplinks, uplink_devices);
  } else {
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();
  }

  uint16_t port = 5000;
  PacketSinkHelper sink("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
  ApplicationContainer sinks = sink.Install(receiver);
  sinks.Start(Seconds(0));
  for (uint32_t r = 0; r < receivers; ++r) {
    sinks.Get(r)->TraceConnectWithoutContext("Rx", MakeCallback(&Received));
  }

  for (uint32_t i = 0; i < g_flows.size(); ++i) {
    uint32_t to_host = receivers > 1 ? (i + 1) % receivers : 0;
    Ipv4Address to = spines > 1 ? PlaneAddress(paths[i].first, to_host)
                                : host_links[to_host].addresses.GetAddress(0);
    Simulator::Schedule(MicroSeconds(g_flows[i].start_us), &Start, size_t(i), sources.Get(i),
                        Address(InetSocketAddress(to, port)));
  }
  Simulator::Schedule(Seconds(0), &Sample);
  Simulator::Stop(MilliSeconds(stop_ms));
  Simulator::Run();

  uint64_t marks = 0, drops = 0;
  for (const auto& red : g_reds) {
    const QueueDisc::Stats& stats = red->GetStats();
    marks += stats.GetNMarkedPackets(RedQueueDisc::UNFORCED_MARK) +
             stats.GetNMarkedPackets(RedQueueDisc::FORCED_MARK);
    drops += stats.nTotalDroppedPackets;
  }
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
      (unsigned long long)g_samples, (unsigned long long)marks, (unsigned long long)drops);
  Simulator::Destroy();
  return g_done == g_flows.size() ? 0 : 1;
}
