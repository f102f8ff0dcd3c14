// The TCP baseline: one kernel-TCP connection per (trainer, server) pair (and per victim client
// and server, endpoint_map.h) in the lossy class (no PFC; switches drop past an egress dynamic
// threshold), DCTCP congestion control at the sender, go-back-N recovery (three duplicate ACKs or
// a timeout), and a stated per-message host-stack cost on each side, added as latency. No send
// window or credits: TCP has its own.
//
// Simplifications (docs/SIMULATION.md): an ACK per segment; the receiver keeps no out-of-order
// segments; the receiver learns message boundaries from the sender's list (framing is free).
// Single-threaded, and not partitioned: a receiver reads its sender's endpoint and messages.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "sim/config.h"
#include "sim/endpoint_map.h"
#include "sim/event_queue.h"
#include "sim/messages.h"
#include "sim/network.h"
#include "sim/stats.h"

namespace bx::sim {

class TcpStack : public HostStack, public Transport {
 public:
  enum TimerKind : uint32_t { kAppend, kDeliver, kRetransmit };

  TcpStack(const SimConfig& config, Network* network, EventQueue* events, MessageTable* messages,
           Stats* stats);
  void SetSink(MessageSink* sink) { sink_ = sink; }

  uint32_t Send(uint32_t from, uint32_t to, MessageKind kind, uint32_t bytes,
                TimeNs origin) override;
  uint32_t NextDataPacket(uint32_t host, TimeNs now, TimeNs* retry_at) override;
  bool HasData(uint32_t host) const override { return !rings_[host].empty(); }
  void OnPacket(uint32_t host, uint32_t packet) override;
  void OnTimer(uint32_t kind, uint32_t arg);

 private:
  struct Endpoint {
    uint64_t stream_end = 0, snd_una = 0, snd_nxt = 0;
    uint64_t rcv_nxt = 0;  // of the peer's stream
    double cwnd = 0, ssthresh = 1e18, alpha = 1;
    uint64_t window_end = 0, acked = 0, marked = 0;
    uint64_t max_in_flight = 0;  // this window (grow_only_when_cwnd_limited)
    bool cwnd_limited = false;   // this window: cwnd, not the NIC, held data back
    uint32_t duplicate_acks = 0;
    TimeNs rto_deadline = 0;
    bool timer_armed = false;
    bool in_ring = false;
    uint32_t unacked_head = kNoMessage, tail = kNoMessage, undelivered = kNoMessage;
  };

  bool CanSend(const Endpoint& e) const;
  void Wake(uint32_t endpoint);
  void ArmTimer(uint32_t endpoint);
  void OnData(uint32_t host, const Packet& p);
  void OnAck(const Packet& p);

  const SimConfig& config_;
  Network* network_;
  EventQueue* events_;
  MessageTable* messages_;
  Stats* stats_;
  MessageSink* sink_ = nullptr;
  EndpointMap map_;
  std::vector<Endpoint> endpoints_;
  std::vector<std::deque<uint32_t>> rings_;
};

}  // namespace bx::sim
