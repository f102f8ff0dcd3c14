#include "sim/tcp_stack.h"

#include <algorithm>

namespace bx::sim {

TcpStack::TcpStack(const SimConfig& config, Network* network, EventQueue* events,
                   MessageTable* messages, Stats* stats)
    : config_(config),
      network_(network),
      events_(events),
      messages_(messages),
      stats_(stats),
      map_(config.workload) {
  size_t qps = EndpointMap::Qps(config.workload);
  endpoints_.resize(qps * 2);
  for (Endpoint& e : endpoints_) {
    e.cwnd = double(config.tcp.initial_window_segments) * config.tcp.mss_bytes;
  }
  rings_.resize(network->hosts());
}

uint32_t TcpStack::Send(uint32_t from, uint32_t to, MessageKind kind, uint32_t bytes,
                        TimeNs origin) {
  Message m;
  m.bytes = bytes;
  m.from = from;
  m.to = to;
  m.enqueued = events_->now();
  m.origin = origin;
  m.kind = kind;
  uint32_t id = messages_->Create(m);
  // The send system call and the stack's work before the bytes are in the socket.
  events_->Schedule(events_->now() + config_.tcp.host_cost_ns, from, EventKind::kHostTimer, id,
                    kAppend);
  return id;
}

void TcpStack::OnTimer(uint32_t kind, uint32_t arg) {
  switch (kind) {
    case kAppend: {
      Message& m = (*messages_)[arg];
      uint32_t endpoint = map_.EndpointFor(m.from, m.to);
      Endpoint& e = endpoints_[endpoint];
      e.stream_end += m.bytes;
      m.stream_end = e.stream_end;
      m.next = kNoMessage;
      if (e.tail == kNoMessage) {
        e.unacked_head = arg;
      } else {
        (*messages_)[e.tail].next = arg;
      }
      e.tail = arg;
      if (e.undelivered == kNoMessage) e.undelivered = arg;
      Wake(endpoint);
      break;
    }
    case kDeliver:
      sink_->OnDelivered(messages_->DeliveryOf(arg));
      break;
    case kRetransmit: {
      Endpoint& e = endpoints_[arg];
      e.timer_armed = false;
      if (e.snd_una == e.stream_end) return;  // everything acknowledged
      TimeNs now = events_->now();
      if (now < e.rto_deadline) {
        ArmTimer(arg);
        return;
      }
      ++stats_->tcp_timeouts;
      e.snd_nxt = e.snd_una;
      e.ssthresh = std::max(2.0 * config_.tcp.mss_bytes, e.cwnd / 2);
      e.cwnd = config_.tcp.mss_bytes;
      e.rto_deadline = now + config_.tcp.min_rto_ns;
      ArmTimer(arg);
      Wake(arg);
      break;
    }
  }
}

void TcpStack::ArmTimer(uint32_t endpoint) {
  Endpoint& e = endpoints_[endpoint];
  if (e.timer_armed) return;
  e.timer_armed = true;
  events_->Schedule(e.rto_deadline, map_.HostOf(endpoint), EventKind::kHostTimer, endpoint,
                    kRetransmit);
}

bool TcpStack::CanSend(const Endpoint& e) const {
  if (e.snd_nxt >= e.stream_end) return false;
  uint64_t in_flight = e.snd_nxt - e.snd_una;
  uint64_t next = std::min<uint64_t>(config_.tcp.mss_bytes, e.stream_end - e.snd_nxt);
  return in_flight == 0 || double(in_flight + next) <= e.cwnd;
}

void TcpStack::Wake(uint32_t endpoint) {
  Endpoint& e = endpoints_[endpoint];
  if (!CanSend(e)) return;
  uint32_t host = map_.HostOf(endpoint);
  if (!e.in_ring) {
    e.in_ring = true;
    rings_[host].push_back(endpoint);
  }
  network_->Kick(host);
}

uint32_t TcpStack::NextDataPacket(uint32_t host, TimeNs now, TimeNs*) {
  std::deque<uint32_t>& ring = rings_[host];
  while (!ring.empty()) {
    uint32_t endpoint = ring.front();
    ring.pop_front();
    Endpoint& e = endpoints_[endpoint];
    if (!CanSend(e)) {
      e.in_ring = false;
      continue;
    }
    uint32_t payload =
        uint32_t(std::min<uint64_t>(config_.tcp.mss_bytes, e.stream_end - e.snd_nxt));
    PacketPool& pool = network_->packets();
    uint32_t id = pool.Allocate();
    Packet& p = pool[id];
    p.type = PacketType::kTcpData;
    p.wire_bytes = payload + config_.fabric.header_bytes;
    p.src_host = host;
    p.dst_host = map_.HostOf(endpoint ^ 1);
    p.flow = endpoint;
    p.ref = payload;
    p.seq = e.snd_nxt;
    e.snd_nxt += payload;
    if (!e.timer_armed) {
      e.rto_deadline = now + config_.tcp.min_rto_ns;
      ArmTimer(endpoint);
    }
    if (CanSend(e)) {
      ring.push_back(endpoint);
    } else {
      e.in_ring = false;
    }
    return id;
  }
  return kNoPacket;
}

void TcpStack::OnPacket(uint32_t host, uint32_t id) {
  PacketPool& pool = network_->packets();
  Packet p = pool[id];
  pool.Free(id);
  if (p.type == PacketType::kTcpData) {
    OnData(host, p);
  } else if (p.type == PacketType::kTcpAck) {
    OnAck(p);
  }
}

void TcpStack::OnData(uint32_t host, const Packet& p) {
  Endpoint& receiver = endpoints_[p.flow ^ 1];
  if (p.seq == receiver.rcv_nxt) {
    receiver.rcv_nxt += p.ref;
    // Whole messages are handed up after the receive-side stack cost.
    Endpoint& sender = endpoints_[p.flow];
    while (sender.undelivered != kNoMessage &&
           (*messages_)[sender.undelivered].stream_end <= receiver.rcv_nxt) {
      events_->Schedule(events_->now() + config_.tcp.host_cost_ns, host, EventKind::kHostTimer,
                        sender.undelivered, kDeliver);
      sender.undelivered = (*messages_)[sender.undelivered].next;
    }
  }
  uint32_t ack = network_->packets().Allocate();
  Packet& a = network_->packets()[ack];
  a.type = PacketType::kTcpAck;
  a.wire_bytes = config_.fabric.control_bytes;
  a.src_host = host;
  a.dst_host = p.src_host;
  a.flow = p.flow;
  a.seq = receiver.rcv_nxt;
  a.ece = p.ecn;
  network_->SendControl(host, ack);
}

void TcpStack::OnAck(const Packet& p) {
  Endpoint& e = endpoints_[p.flow];
  const TcpConfig& tcp = config_.tcp;
  if (p.seq > e.snd_una) {
    uint64_t acked = p.seq - e.snd_una;
    // Before this ACK: bytes in flight, and whether cwnd left no room for the next segment of
    // data that was waiting (our stack hands the NIC a packet only when its port is free, so a
    // flow that its NIC or the fabric limits keeps in flight less than cwnd).
    uint64_t in_flight = e.snd_nxt - e.snd_una;
    e.max_in_flight = std::max(e.max_in_flight, in_flight);
    const bool data_waiting = e.snd_nxt < e.stream_end;
    if (data_waiting && double(in_flight + tcp.mss_bytes) > e.cwnd) e.cwnd_limited = true;
    e.snd_una = p.seq;
    if (e.snd_nxt < e.snd_una) e.snd_nxt = e.snd_una;
    e.duplicate_acks = 0;
    e.rto_deadline = events_->now() + tcp.min_rto_ns;
    // Whether this ACK may grow cwnd, from this window so far (always, unless the option).
    bool may_grow = !tcp.grow_only_when_cwnd_limited ||
                    (e.cwnd < e.ssthresh ? e.cwnd < 2.0 * double(e.max_in_flight) : e.cwnd_limited);
    // DCTCP: alpha from the fraction of marked bytes, once per window of data.
    e.acked += acked;
    if (p.ece) e.marked += acked;
    if (e.snd_una >= e.window_end) {
      e.alpha = (1 - tcp.dctcp_g) * e.alpha + tcp.dctcp_g * double(e.marked) / double(e.acked);
      if (e.marked > 0) {
        e.cwnd = std::max(double(tcp.mss_bytes), e.cwnd * (1 - e.alpha / 2));
        e.ssthresh = e.cwnd;
      }
      e.acked = e.marked = 0;
      e.window_end = e.snd_nxt;
      e.max_in_flight = 0;
      e.cwnd_limited = false;
    }
    if (!p.ece && may_grow) {
      e.cwnd += e.cwnd < e.ssthresh ? double(acked) : double(tcp.mss_bytes) * acked / e.cwnd;
    }
    while (e.unacked_head != kNoMessage && (*messages_)[e.unacked_head].stream_end <= e.snd_una) {
      uint32_t done = e.unacked_head;
      e.unacked_head = (*messages_)[done].next;
      if (e.unacked_head == kNoMessage) e.tail = kNoMessage;
      sink_->OnSendCompleted(done);
    }
    Wake(p.flow);
  } else if (p.seq == e.snd_una && e.snd_nxt > e.snd_una) {
    if (++e.duplicate_acks == 3) {
      ++stats_->tcp_fast_retransmits;
      e.snd_nxt = e.snd_una;  // go-back-N
      e.ssthresh = std::max(2.0 * tcp.mss_bytes, e.cwnd / 2);
      e.cwnd = e.ssthresh;
      Wake(p.flow);
    }
  }
}

}  // namespace bx::sim
