#include "sim/network.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace bx::sim {
namespace {

constexpr uint32_t kUnconnected = UINT32_MAX;

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

}  // namespace

Network::Network(const FabricConfig& config, uint32_t hosts, EventQueue* events, uint64_t seed,
                 Stats* stats)
    : config_(config), hosts_(hosts), events_(events), stats_(stats) {
  leaves_ = LeafCount(config, hosts);
  uint32_t spines = leaves_ > 1 ? config.spines : 0;
  host_leaf_.resize(hosts);
  host_slot_.resize(hosts);
  for (uint32_t h = 0; h < hosts; ++h) {
    host_leaf_[h] = config.interleave_hosts ? h % leaves_ : h / config.hosts_per_leaf;
    host_slot_[h] = config.interleave_hosts ? h / leaves_ : h % config.hosts_per_leaf;
  }
  // Hosts: one port each.
  for (uint32_t h = 0; h < hosts; ++h) {
    host_port_.push_back(AddPort(h, 0, config.host_gbps));
    ports_.back().pauser = PauseTier::kLeafToHost;
  }
  // Headroom covers what arrives after a pause is sent: rate x link delay x headroom_rtts.
  auto headroom = [&](double gbps) {
    return uint32_t(config.headroom_rtts * gbps / 8 * double(config.link_delay_ns)) +
           config.headroom_cells * (config.mtu_bytes + config.header_bytes);
  };
  for (uint32_t l = 0; l < leaves_; ++l) {
    uint32_t node = hosts + l;
    Switch sw{false, uint32_t(ports_.size()), config.hosts_per_leaf + spines, nullptr};
    std::vector<uint32_t> room;
    for (uint32_t i = 0; i < config.hosts_per_leaf; ++i) {
      AddPort(node, i, config.host_gbps);
      room.push_back(headroom(config.host_gbps));
    }
    for (uint32_t s = 0; s < spines; ++s) {
      AddPort(node, config.hosts_per_leaf + s, config.uplink_gbps);
      ports_.back().pauser = PauseTier::kSpineToLeaf;
      room.push_back(headroom(config.uplink_gbps));
    }
    sw.mmu = std::make_unique<SwitchMmu>(config, std::move(room));
    switches_.push_back(std::move(sw));
  }
  for (uint32_t s = 0; s < spines; ++s) {
    uint32_t node = hosts + leaves_ + s;
    Switch sw{true, uint32_t(ports_.size()), leaves_, nullptr};
    std::vector<uint32_t> room;
    for (uint32_t l = 0; l < leaves_; ++l) {
      AddPort(node, l, config.uplink_gbps);
      ports_.back().pauser = PauseTier::kLeafToSpine;
      room.push_back(headroom(config.uplink_gbps));
    }
    sw.mmu = std::make_unique<SwitchMmu>(config, std::move(room));
    switches_.push_back(std::move(sw));
  }
  for (uint32_t h = 0; h < hosts; ++h) {
    Connect(host_port_[h], switches_[host_leaf_[h]].first_port + host_slot_[h]);
  }
  for (uint64_t i = 0; i < switches_.size(); ++i) {
    switch_rng_.push_back(Random::Stream(seed, i));
  }
  for (uint32_t l = 0; l < leaves_; ++l) {
    for (uint32_t s = 0; s < spines; ++s) {
      Connect(switches_[l].first_port + config.hosts_per_leaf + s,
              switches_[leaves_ + s].first_port + l);
    }
  }
}

uint32_t Network::AddPort(uint32_t node, uint32_t local, double gbps) {
  Port port{};
  port.node = node;
  port.local = local;
  port.peer = kUnconnected;
  port.ps_per_byte = uint32_t(std::lround(8000.0 / gbps));
  // RED thresholds scale with the port's rate (a 100G port marks at 4x the bytes of a 25G one).
  double scale = gbps / 25.0;
  port.ecn_kmin = uint64_t(double(config_.ecn_kmin_bytes) * scale);
  port.ecn_kmax = uint64_t(double(config_.ecn_kmax_bytes) * scale);
  ports_.push_back(port);
  return uint32_t(ports_.size() - 1);
}

void Network::Connect(uint32_t a, uint32_t b) {
  ports_[a].peer = b;
  ports_[b].peer = a;
}

uint32_t Network::LeafOf(uint32_t host) const {
  return host_leaf_[host];
}

TimeNs Network::HostSerialisation(uint32_t bytes) const {
  return (TimeNs(bytes) * ports_[host_port_[0]].ps_per_byte + 999) / 1000;
}

uint32_t Network::Route(const Switch& sw, uint32_t switch_index, const Packet& p) const {
  if (sw.spine) return host_leaf_[p.dst_host];
  if (host_leaf_[p.dst_host] == switch_index) return host_slot_[p.dst_host];
  return config_.hosts_per_leaf +
         EcmpSpine(p.flow, p.src_host, p.dst_host, sw.ports - config_.hosts_per_leaf);
}

uint32_t Network::EcmpSpine(uint32_t flow, uint32_t src, uint32_t dst, uint32_t spines) {
  uint64_t h = Mix((uint64_t(flow) << 32) ^ (uint64_t(src) << 16) ^ dst);
  return uint32_t(h % spines);
}

bool Network::StrictPriority(const Packet& p) const {
  if (!p.control()) return false;
  return !(config_.tcp_acks_with_data && p.type == PacketType::kTcpAck);
}

uint64_t Network::UplinkQueueBytes(uint32_t leaf) const {
  const Switch& sw = switches_[leaf];
  uint64_t bytes = 0;
  for (uint32_t i = config_.hosts_per_leaf; i < sw.ports; ++i) {
    bytes += ports_[sw.first_port + i].data_bytes;
  }
  return bytes;
}

void Network::Kick(uint32_t host) {
  TryTransmit(host_port_[host]);
}

void Network::SendControl(uint32_t host, uint32_t packet) {
  uint32_t port = host_port_[host];
  ports_[port].control.Push(packets_, packet);
  TryTransmit(port);
}

void Network::OnArrive(uint32_t id) {
  Packet& p = packets_[id];
  const Port& in = ports_[p.at_port];
  if (IsHostNode(in.node)) {
    stack_->OnPacket(in.node, id);
    return;
  }
  uint32_t switch_index = in.node - hosts_;
  Switch& sw = switches_[switch_index];
  uint32_t out = sw.first_port + Route(sw, switch_index, p);
  Port& o = ports_[out];
  assert(o.peer != kUnconnected);
  if (StrictPriority(p)) {
    o.control.Push(packets_, id);
  } else if (p.lossless()) {
    p.in_port = uint16_t(in.local);
    if (config_.ecn_at_enqueue) RedMark(o, p, switch_rng_[switch_index]);
    sw.mmu->Admit(in.local, p.wire_bytes);
    o.data_bytes += p.wire_bytes;
    o.data.Push(packets_, id);
    if (sw.mmu->ShouldPause(in.local)) SendPause(sw, p.at_port, true);
  } else {
    if (!sw.mmu->AdmitLossy(o.data_bytes, p.wire_bytes)) {
      ++stats_->drops;
      packets_.Free(id);
      return;
    }
    if (config_.ecn_at_enqueue) RedMark(o, p, switch_rng_[switch_index]);
    sw.mmu->AddLossy(p.wire_bytes);
    o.data_bytes += p.wire_bytes;
    o.data.Push(packets_, id);
  }
  stats_->peak_buffer_bytes = std::max(stats_->peak_buffer_bytes, sw.mmu->occupancy());
  TryTransmit(out);
}

void Network::SendPause(const Switch& sw, uint32_t global_port, bool pause) {
  uint32_t local = ports_[global_port].local;
  sw.mmu->SetPaused(local, pause);
  uint32_t target = ports_[global_port].peer;
  if (pause) {
    ++stats_->pfc_xoff[size_t(ports_[target].pauser)];
    if (stats_->first_xoff_at < 0) {
      stats_->first_xoff_at = events_->now();
      stats_->first_xoff_order = events_->popped_order();
      stats_->first_xoff_occupancy = sw.mmu->SharedUsed(local) + sw.mmu->headroom_bytes(local);
    }
  }
  // Pause frames bypass the data queue: they arrive one link delay later.
  ScheduleAt(events_->now() + config_.link_delay_ns, ports_[target].node, EventKind::kPauseArrive,
             target, pause ? 1 : 0);
}

void Network::ScheduleAt(TimeNs at, uint32_t node, EventKind kind, uint32_t a, uint32_t b) {
  if (partitioning_ == nullptr || partitioning_->Owns(node)) {
    events_->Schedule(at, node, kind, a, b);
    return;
  }
  Handover h;
  h.event = Event{at, events_->ReserveOrder(), a, b, node, kind};
  if (kind == EventKind::kPacketArrive) {
    h.packet = packets_[a];
    packets_.Free(a);
  }
  exchange_->Box(partitioning_->self, partitioning_->Of(node), window_).push_back(h);
}

void Network::Receive(Handover& h) {
  if (h.event.kind == EventKind::kPacketArrive) {
    uint32_t id = packets_.Allocate();
    packets_[id] = h.packet;
    h.event.a = id;
  }
  events_->Deliver(h.event);
}

void Network::OnPause(uint32_t port, bool pause) {
  Port& pt = ports_[port];
  if (pause) {
    if (!pt.paused) {
      pt.paused = true;
      pt.paused_since = events_->now();
    }
    return;
  }
  if (!pt.paused) return;
  pt.paused = false;
  stats_->paused_ns[size_t(pt.pauser)] += events_->now() - pt.paused_since;
  TryTransmit(port);
}

void Network::OnNicWake(uint32_t host) {
  ports_[host_port_[host]].wake_pending = false;
  TryTransmit(host_port_[host]);
}

void Network::OnTxDone(uint32_t port) {
  ports_[port].busy = false;
  ports_[port].tx_done_due = false;
  TryTransmit(port);
}

bool Network::HasWork(const Port& pt) const {
  if (!pt.control.empty()) return true;
  return IsHostNode(pt.node) ? stack_->HasData(pt.node) : !pt.data.empty();
}

// Every change that gives a port work calls this, so a busy port whose serialisation end was not
// scheduled schedules it here, or, if that end is already past, is idle now.
void Network::TryTransmit(uint32_t port) {
  Port& pt = ports_[port];
  if (pt.busy) {
    if (pt.tx_done_due) return;
    if (!events_->Passed(pt.tx_done_at, pt.tx_done_order)) {
      pt.tx_done_due = true;
      events_->ScheduleReserved(pt.tx_done_at, pt.tx_done_order, pt.node, EventKind::kPortTxDone,
                                port);
      return;
    }
    pt.busy = false;
  }
  if (!pt.control.empty()) {
    Transmit(port, pt.control.Pop(packets_));
    return;
  }
  if (pt.paused) return;
  if (IsHostNode(pt.node)) {
    TimeNs retry = INT64_MAX;
    uint32_t id = stack_->NextDataPacket(pt.node, events_->now(), &retry);
    if (id != kNoPacket) {
      Transmit(port, id);
    } else if (retry != INT64_MAX && (!pt.wake_pending || retry < pt.wake_at)) {
      pt.wake_pending = true;
      pt.wake_at = retry;
      events_->Schedule(retry, pt.node, EventKind::kNicWake, pt.node);
    }
    return;
  }
  if (pt.data.empty()) return;
  uint32_t id = pt.data.Pop(packets_);
  // The packet queued behind it waited in the buffer and left the cache; it is needed when this
  // one's serialisation ends.
  if (!pt.data.empty()) PrefetchPacket(pt.data.head);
  Packet& p = packets_[id];
  Switch& sw = switches_[pt.node - hosts_];
  pt.data_bytes -= p.wire_bytes;
  if (p.lossless()) {
    sw.mmu->Release(p.in_port, p.wire_bytes);
    uint32_t ingress = sw.first_port + p.in_port;
    if (sw.mmu->ShouldResume(p.in_port)) SendPause(sw, ingress, false);
  } else {
    sw.mmu->RemoveLossy(p.wire_bytes);
  }
  // RED on the egress queue left behind, at dequeue (unless it marked on arrival).
  if (!config_.ecn_at_enqueue) RedMark(pt, p, switch_rng_[pt.node - hosts_]);
  Transmit(port, id);
}

void Network::Transmit(uint32_t port, uint32_t id) {
  Port& pt = ports_[port];
  Packet& p = packets_[id];
  pt.busy = true;
  TimeNs done = events_->now() + (TimeNs(p.wire_bytes) * pt.ps_per_byte + 999) / 1000;
  pt.tx_done_at = done;
  pt.tx_done_order = events_->ReserveOrder();
  pt.tx_done_due = !config_.skip_idle_port_events || HasWork(pt);
  if (pt.tx_done_due) {
    events_->ScheduleReserved(done, pt.tx_done_order, pt.node, EventKind::kPortTxDone, port);
  }
  p.at_port = pt.peer;
  if (IsHostNode(ports_[pt.peer].node)) stack_->Prefetch(p);
  ScheduleAt(done + config_.link_delay_ns, ports_[pt.peer].node, EventKind::kPacketArrive, id);
}

// RED against the port's data queue: marks `p` with probability rising from 0 at Kmin to Pmax at
// Kmax, and always beyond. At dequeue (TryTransmit), or on arrival with
// FabricConfig::ecn_at_enqueue as ns-3's RED does.
void Network::RedMark(const Port& pt, Packet& p, Random& rng) {
  if (pt.data_bytes <= pt.ecn_kmin) return;
  bool mark = pt.data_bytes >= pt.ecn_kmax;
  if (!mark) {
    double prob =
        config_.ecn_pmax * double(pt.data_bytes - pt.ecn_kmin) / double(pt.ecn_kmax - pt.ecn_kmin);
    mark = rng.Uniform() < prob;
  }
  if (mark && !p.ecn) {
    p.ecn = true;
    ++stats_->ecn_marks;
  }
}

uint32_t Network::directed_links() const {
  uint32_t n = 0;
  for (const Port& pt : ports_) n += pt.peer != kUnconnected ? 1 : 0;
  return n;
}

void Network::Finish(TimeNs now) {
  for (Port& pt : ports_) {
    if (pt.paused) {
      stats_->paused_ns[size_t(pt.pauser)] += now - pt.paused_since;
      pt.paused_since = now;
    }
  }
  for (const Switch& sw : switches_) {
    stats_->headroom_overflow_bytes += sw.mmu->headroom_overflow();
  }
}

}  // namespace bx::sim
