#include "sim/rdma_stack.h"

#include <algorithm>
#include <cassert>

namespace bx::sim {

RdmaStack::Endpoint::Endpoint(const SimConfig& config, uint32_t fragment, double line_mbps)
    : dcqcn(&config.dcqcn, line_mbps),
      window(config.engine.window_bytes),
      credits(config.engine.recv_queue_depth),
      returner(config.engine.recv_queue_depth),
      scheduler(fragment) {}

RdmaStack::RdmaStack(const SimConfig& config, Network* network, EventQueue* events,
                     MessageTable* messages, Stats* stats)
    : config_(config),
      network_(network),
      events_(events),
      messages_(messages),
      stats_(stats),
      map_(config.workload),
      fragment_bytes_(config.engine.fragment_bytes) {
  const EngineModelConfig& e = config.engine;
  if (e.window_bytes != 0 && e.fragment_fits_window) {
    fragment_bytes_ = uint32_t(std::min<uint64_t>(fragment_bytes_, e.window_bytes));
  }
  size_t qps = EndpointMap::Qps(config.workload);
  endpoints_.reserve(qps * 2);
  for (size_t i = 0; i < qps * 2; ++i) {
    endpoints_.emplace_back(config, fragment_bytes_, network->host_rate_mbps());
  }
  rings_.resize(network->hosts());
}

uint32_t RdmaStack::NewWorkRequest(const WorkRequest& wr) {
  if (free_work_requests_.empty()) {
    work_requests_.push_back(wr);
    return uint32_t(work_requests_.size() - 1);
  }
  uint32_t id = free_work_requests_.back();
  free_work_requests_.pop_back();
  work_requests_[id] = wr;
  return id;
}

void RdmaStack::Append(WorkRequestList& list, uint32_t id) {
  work_requests_[id].next = UINT32_MAX;
  if (list.empty()) {
    list.head = id;
  } else {
    work_requests_[list.tail].next = id;
  }
  list.tail = id;
}

uint32_t RdmaStack::PopFront(WorkRequestList& list) {
  uint32_t id = list.head;
  list.head = work_requests_[id].next;
  if (list.head == UINT32_MAX) list.tail = UINT32_MAX;
  return id;
}

uint32_t RdmaStack::Send(uint32_t from, uint32_t to, MessageKind kind, uint32_t bytes,
                         TimeNs origin) {
  Message m;
  m.bytes = bytes;
  m.from = from;
  m.to = to;
  m.enqueued = events_->now();
  m.origin = origin;
  m.kind = kind;
  m.state = kQueued;
  uint32_t id = messages_->Create(m);
  uint32_t endpoint = map_.EndpointFor(from, to);
  Endpoint& e = endpoints_[endpoint];
  if (e.message_tail == kNoMessage) {
    e.message_head = id;
  } else {
    (*messages_)[e.message_tail].next = id;
  }
  e.message_tail = id;
  Pump(endpoint);
  return id;
}

void RdmaStack::Stall(Endpoint& e) {
  // Once per wait, as SendWindow::NoteStall asks.
  if (!e.stalled) e.window.NoteStall();
  e.stalled = true;
}

void RdmaStack::Pump(uint32_t endpoint) {
  Endpoint& e = endpoints_[endpoint];
  while (e.posted < config_.engine.send_queue_depth) {
    if (!e.control.empty()) {
      if (!PumpControl(endpoint)) return;
      continue;
    }
    if (!PumpMessage(endpoint)) return;
  }
}

bool RdmaStack::PumpControl(uint32_t endpoint) {
  Endpoint& e = endpoints_[endpoint];
  const WorkRequest& wr = work_requests_[e.control.head];
  bool credit_ok =
      wr.what == What::kCredit ? e.credits.CanSendCreditUpdate() : e.credits.CanSendData();
  if (!credit_ok) {
    ++stats_->credit_stalls;
    return false;
  }
  if (!e.window.CanPost(wr.bytes)) {
    Stall(e);
    return false;
  }
  uint32_t id = PopFront(e.control);
  if (work_requests_[id].what == What::kCredit) e.credit_message_queued = false;
  Post(endpoint, id);
  return true;
}

bool RdmaStack::PumpMessage(uint32_t endpoint) {
  Endpoint& e = endpoints_[endpoint];
  if (e.message_head == kNoMessage) return false;
  Message& m = (*messages_)[e.message_head];
  if (m.state == kAwaitCts) return false;  // the flow left the ring when its RTS went
  e.scheduler.Activate(0);
  e.scheduler.Current();
  WorkRequest wr;
  wr.message = e.message_head;
  if (m.state == kQueued && m.bytes <= config_.engine.eager_limit) {
    wr.bytes = m.bytes;
    wr.op = Op::kSend;
    wr.what = What::kApp;
  } else if (m.state == kQueued) {
    wr.bytes = config_.fabric.control_bytes;
    wr.op = Op::kSend;
    wr.what = What::kRts;
  } else {
    wr.bytes = std::min(fragment_bytes_, m.bytes - m.posted);
    bool last = m.posted + wr.bytes == m.bytes;
    wr.op = last ? Op::kWriteWithImm : Op::kWrite;
    wr.what = last ? What::kApp : What::kNone;
  }
  if (wr.op != Op::kWrite && !e.credits.CanSendData()) {
    ++stats_->credit_stalls;
    return false;
  }
  if (!e.window.CanPost(wr.bytes)) {
    Stall(e);
    return false;
  }
  if (!e.scheduler.Spend(wr.bytes)) {
    e.scheduler.EndVisit();  // the next Current() tops the deficit up
    return true;
  }
  Post(endpoint, NewWorkRequest(wr));
  bool message_done = false;
  if (wr.what == What::kRts) {
    m.state = kAwaitCts;
    e.scheduler.Deactivate();
    return true;
  }
  if (wr.op == Op::kSend) {
    message_done = true;
  } else {
    m.posted += wr.bytes;
    message_done = m.posted == m.bytes;
    e.scheduler.EndVisit();  // one fragment per visit
  }
  if (message_done) {
    e.message_head = m.next;
    if (e.message_head == kNoMessage) {
      e.message_tail = kNoMessage;
      if (e.scheduler.active(0)) {
        e.scheduler.Current();
        e.scheduler.Deactivate();
      }
    }
  }
  return true;
}

void RdmaStack::Post(uint32_t endpoint, uint32_t id) {
  Endpoint& e = endpoints_[endpoint];
  WorkRequest& wr = work_requests_[id];
  if (wr.op != Op::kWrite) {
    e.credits.Spend();
    wr.credits = e.returner.Take(UINT32_MAX);
  }
  e.window.OnPosted(wr.bytes);
  e.stalled = false;
  ++e.posted;
  Append(e.nic, id);
  uint32_t host = map_.HostOf(endpoint);
  if (!e.in_ring) {
    e.in_ring = true;
    rings_[host].push_back(RingEntry{e.next_send, endpoint});
  }
  network_->Kick(host);
}

uint32_t RdmaStack::NextDataPacket(uint32_t host, TimeNs now, TimeNs* retry_at) {
  std::deque<RingEntry>& ring = rings_[host];
  const FabricConfig& fabric = config_.fabric;
  for (size_t n = ring.size(); n > 0; --n) {
    RingEntry entry = ring.front();
    ring.pop_front();
    if (entry.next_send > now) {
      *retry_at = std::min(*retry_at, entry.next_send);
      ring.push_back(entry);
      continue;
    }
    uint32_t endpoint = entry.endpoint;
    Endpoint& e = endpoints_[endpoint];
    // Only this function empties e.nic, and it takes the endpoint out of the ring when it does.
    assert(!e.nic.empty());
    uint32_t wr_id = e.nic.head;
    WorkRequest& wr = work_requests_[wr_id];
    uint32_t payload = std::min(fabric.mtu_bytes, wr.bytes - wr.sent);
    wr.sent += payload;
    bool last = wr.sent == wr.bytes;
    if (last) PopFront(e.nic);
    PacketPool& pool = network_->packets();
    uint32_t id = pool.Allocate();
    Packet& p = pool[id];
    p.type = PacketType::kRdmaData;
    p.wire_bytes = payload + fabric.header_bytes;
    p.src_host = host;
    p.dst_host = map_.HostOf(endpoint ^ 1);
    p.flow = endpoint;
    p.ref = wr_id;
    p.last = last;
    if (last) Describe(wr, &p);
    double rate = config_.dcqcn.enabled ? e.dcqcn.RateAt(now) : network_->host_rate_mbps();
    // Pacing: the next cell of this QP may start once this one would have left at `rate`.
    e.next_send = now + TimeNs(double(p.wire_bytes) * 8000.0 / rate + 0.5);
    if (!e.nic.empty()) {
      ring.push_back(RingEntry{e.next_send, endpoint});
    } else {
      e.in_ring = false;
    }
    // The QP this port serves next, a cell's serialisation from now (see Prefetch).
    if (!ring.empty()) __builtin_prefetch(&endpoints_[ring.front().endpoint]);
    return id;
  }
  return kNoPacket;
}

// What the last cell tells the receiver: the opcode and, for a SEND or WRITE_WITH_IMM, what the
// payload or immediate carries (the engine's header: credits, control kind, the message).
void RdmaStack::Describe(const WorkRequest& wr, Packet* p) {
  p->op = uint8_t(wr.op);
  p->what = uint8_t(wr.what);
  assert(wr.credits <= UINT16_MAX);
  p->credits = uint16_t(wr.credits);
  p->message = wr.message;
  if (wr.what == What::kApp) {
    const Message& m = (*messages_)[wr.message];
    p->kind = uint8_t(m.kind);
    p->started = StartedAt(m);
  }
}

double RdmaStack::CurrentRateMbps(uint32_t from, uint32_t to, TimeNs now) {
  if (!config_.dcqcn.enabled) return network_->host_rate_mbps();
  return endpoints_[map_.EndpointFor(from, to)].dcqcn.RateAt(now);
}

void RdmaStack::SendNicControl(uint32_t host, PacketType type, uint32_t dst, uint32_t flow,
                               uint32_t ref, uint32_t message) {
  PacketPool& pool = network_->packets();
  uint32_t id = pool.Allocate();
  Packet& p = pool[id];
  p.type = type;
  p.wire_bytes = config_.fabric.control_bytes;
  p.src_host = host;
  p.dst_host = dst;
  p.flow = flow;
  p.ref = ref;
  p.message = message;
  network_->SendControl(host, id);
}

// The endpoints are tens of megabytes at paper scale, and the one a packet is for is a cache miss
// almost every time: start loading it while the packet crosses its last link. A cell that is not
// the last of its work request reads only the NIC's fields.
void RdmaStack::Prefetch(const Packet& p) {
  bool whole = p.type != PacketType::kRdmaData || p.last;
  uint32_t endpoint = p.type == PacketType::kRdmaData ? p.flow ^ 1 : p.flow;
  const char* at = reinterpret_cast<const char*>(&endpoints_[endpoint]);
  size_t bytes = whole ? sizeof(Endpoint) : 64;
  for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(at + offset);
  if (p.type == PacketType::kRdmaAck) {
    // Complete reads the work request, and the engine then most often posts the next fragment
    // of the same message.
    __builtin_prefetch(&work_requests_[p.ref]);
    messages_->Prefetch(p.message);
  }
}

void RdmaStack::OnPacket(uint32_t host, uint32_t id) {
  PacketPool& pool = network_->packets();
  Packet p = pool[id];
  pool.Free(id);
  TimeNs now = events_->now();
  switch (p.type) {
    case PacketType::kRdmaData: {
      uint32_t receiver = p.flow ^ 1;
      Endpoint& r = endpoints_[receiver];
      if (p.ecn && (r.last_cnp < 0 || now - r.last_cnp >= config_.dcqcn.cnp_interval_ns)) {
        r.last_cnp = now;
        ++stats_->cnps;
        SendNicControl(host, PacketType::kCnp, p.src_host, p.flow, 0);
      }
      if (p.last) {
        SendNicControl(host, PacketType::kRdmaAck, p.src_host, p.flow, p.ref, p.message);
        if (Op(p.op) != Op::kWrite) Receive(receiver, p);
      }
      break;
    }
    case PacketType::kRdmaAck:
      Complete(p.flow, p.ref);
      break;
    case PacketType::kCnp:
      if (config_.dcqcn.enabled) endpoints_[p.flow].dcqcn.OnCnp(now);
      break;
    default:
      break;
  }
}

void RdmaStack::Receive(uint32_t endpoint, const Packet& wr) {
  Endpoint& r = endpoints_[endpoint];
  if (wr.credits > 0) r.credits.Return(wr.credits);
  if (r.returner.OnReceiveConsumed()) r.returner.OnReposted(r.returner.batch());
  if (r.returner.NeedsCreditMessage() && !r.credit_message_queued) {
    WorkRequest credit;
    credit.bytes = config_.fabric.control_bytes;
    credit.what = What::kCredit;
    Append(r.control, NewWorkRequest(credit));
    r.credit_message_queued = true;
  }
  switch (What(wr.what)) {
    case What::kRts: {
      WorkRequest cts;
      cts.bytes = config_.fabric.control_bytes;
      cts.what = What::kCts;
      cts.message = wr.message;
      Append(r.control, NewWorkRequest(cts));
      break;
    }
    case What::kCts:
      // In order: the message awaiting its CTS is at the head of this endpoint's queue.
      (*messages_)[wr.message].state = kWriting;
      break;
    case What::kApp:
      sink_->OnDelivered(
          Delivery{wr.message, wr.src_host, wr.dst_host, wr.started, MessageKind(wr.kind)});
      break;
    default:
      break;
  }
  Pump(endpoint);
}

void RdmaStack::Complete(uint32_t endpoint, uint32_t id) {
  Endpoint& e = endpoints_[endpoint];
  WorkRequest wr = work_requests_[id];
  free_work_requests_.push_back(id);
  e.window.OnCompleted(wr.bytes);
  --e.posted;
  if (wr.what == What::kApp) sink_->OnSendCompleted(wr.message);
  Pump(endpoint);
}

void RdmaStack::Finish() {
  for (const Endpoint& e : endpoints_) {
    stats_->window_stalls += e.window.stalls();
    stats_->dcqcn_rate_cuts += e.dcqcn.cuts();
    stats_->max_outstanding_bytes =
        std::max(stats_->max_outstanding_bytes, e.window.max_outstanding());
  }
}

}  // namespace bx::sim
