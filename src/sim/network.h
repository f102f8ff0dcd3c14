// The fabric: hosts, a two-tier leaf-spine of shared-buffer output-queued switches, the links
// between them, PFC pauses and ECN marking. Hosts plug in through HostStack: the fabric asks a
// host's stack for its next data packet when the NIC port is free, and hands it arriving packets.
//
// Every port has two FIFOs: control (ACKs, CNPs; strict priority, never paused) and data. A packet
// costs one or two events per hop: its arrival at the next node and, only when something waits
// at the port by then, its port's serialisation end (a port that ends a packet with nothing to
// send next just stays idle; skipping that no-op event changes no result, event_queue.h).
// Single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sim/config.h"
#include "sim/event_queue.h"
#include "sim/packet.h"
#include "sim/partition.h"
#include "sim/random.h"
#include "sim/stats.h"
#include "sim/switch_mmu.h"

namespace bx::sim {

class HostStack {
 public:
  virtual ~HostStack() = default;
  // The NIC port of `host` is free: the next data packet, or kNoPacket. When a QP has data but
  // its rate does not allow it yet, `*retry_at` is lowered to when it may send.
  virtual uint32_t NextDataPacket(uint32_t host, TimeNs now, TimeNs* retry_at) = 0;
  // Whether a QP of `host` has cells waiting (NextDataPacket would look at something). Data that
  // arrives later comes with a Kick.
  virtual bool HasData(uint32_t host) const = 0;
  // A packet reached `host`; the stack owns it (and frees it).
  virtual void OnPacket(uint32_t host, uint32_t packet) = 0;
  // Speed only: `packet` is on its last link, a link delay from OnPacket; the stack may start
  // loading what OnPacket will read.
  virtual void Prefetch(const Packet& /*packet*/) {}
};

class Network {
 public:
  Network(const FabricConfig& config, uint32_t hosts, EventQueue* events, uint64_t seed,
          Stats* stats);

  // Which nodes are this partition's, and where events for the others go (both outlive the
  // Network). Without it every node is local.
  void SetPartition(const Partitioning* partitioning, Exchange* exchange) {
    partitioning_ = partitioning;
    exchange_ = exchange;
  }
  // Nodes: hosts [0, hosts), then leaves, then spines.
  uint32_t nodes() const { return hosts_ + uint32_t(switches_.size()); }
  uint32_t spines() const { return uint32_t(switches_.size()) - leaves_; }
  // Node id of a leaf or spine switch.
  uint32_t LeafNode(uint32_t leaf) const { return hosts_ + leaf; }
  uint32_t SpineNode(uint32_t spine) const { return hosts_ + leaves_ + spine; }
  // A packet or pause handed over from another partition (its packet joins this pool).
  void Receive(Handover& handover);
  // The window a partitioned run is in (which Exchange boxes take handovers).
  void SetWindow(uint64_t window) { window_ = window; }

  void SetHostStack(HostStack* stack) { stack_ = stack; }
  PacketPool& packets() { return packets_; }
  const FabricConfig& config() const { return config_; }
  uint32_t hosts() const { return hosts_; }
  uint32_t leaves() const { return leaves_; }
  uint32_t LeafOf(uint32_t host) const;
  // Leaves a fabric of `hosts` has (hosts_per_leaf each, the last one perhaps partly filled).
  static uint32_t LeafCount(const FabricConfig& config, uint32_t hosts) {
    return (hosts + config.hosts_per_leaf - 1) / config.hosts_per_leaf;
  }
  double host_rate_mbps() const { return config_.host_gbps * 1000; }
  // Serialisation time of `bytes` on a host link.
  TimeNs HostSerialisation(uint32_t bytes) const;

  // A host has new data: start its NIC port if idle.
  void Kick(uint32_t host);
  // Queue a NIC-generated control packet (ACK, CNP) on the host's port.
  void SendControl(uint32_t host, uint32_t packet);

  // Speed only: an arrival of `packet` is a few events away.
  void PrefetchPacket(uint32_t packet) const { __builtin_prefetch(&packets_.at_unchecked(packet)); }

  // Event handlers.
  void OnTxDone(uint32_t port);
  void OnArrive(uint32_t packet);
  void OnPause(uint32_t port, bool pause);
  void OnNicWake(uint32_t host);

  // Closes the books at the end of a run (paused time still running) and peak occupancy.
  void Finish(TimeNs now);
  // Connected ports = directed links (each link counts once per direction).
  uint32_t directed_links() const;
  // Data bytes queued at the leaf port toward `host` (not counting the packet on the wire).
  uint64_t EgressQueueBytes(uint32_t host) const {
    return ports_[ports_[host_port_[host]].peer].data_bytes;
  }
  // Data bytes queued at a leaf's uplink ports, all spines together.
  uint64_t UplinkQueueBytes(uint32_t leaf) const;

  // ECMP: the spine (of `spines`) that a packet of `flow` from `src` to `dst` takes. Per flow and
  // direction, as a switch hashes a 5-tuple: every packet of a flow takes the same path, and its
  // ACKs (src and dst swapped) a path of their own.
  static uint32_t EcmpSpine(uint32_t flow, uint32_t src, uint32_t dst, uint32_t spines);

 private:
  struct Port {
    uint32_t node;
    uint32_t local;  // index within its node
    uint32_t peer;   // global id of the port at the other end
    uint32_t ps_per_byte;
    PacketFifo control;
    PacketFifo data;
    uint64_t data_bytes = 0;  // egress data queue length (ECN, lossy admission)
    uint64_t ecn_kmin = 0, ecn_kmax = 0;
    bool busy = false;         // serialising until tx_done_at, or its end not yet noticed
    bool tx_done_due = false;  // the kPortTxDone event for tx_done_at is scheduled
    TimeNs tx_done_at = 0;
    uint64_t tx_done_order = 0;  // its place among events at the same time, reserved
    bool paused = false;
    TimeNs paused_since = 0;
    PauseTier pauser = PauseTier::kCount;  // the tier that pauses this port
    bool wake_pending = false;
    TimeNs wake_at = 0;
  };
  struct Switch {
    bool spine;
    uint32_t first_port;
    uint32_t ports;
    std::unique_ptr<SwitchMmu> mmu;
  };

  uint32_t AddPort(uint32_t node, uint32_t local, double gbps);
  void Connect(uint32_t a, uint32_t b);
  uint32_t Route(const Switch& sw, uint32_t switch_index, const Packet& p) const;
  // Whether a switch queues the packet in the strict-priority control FIFO: ACKs and CNPs, but
  // TCP's ACKs with the data when tcp_acks_with_data says so.
  bool StrictPriority(const Packet& p) const;
  void TryTransmit(uint32_t port);
  void Transmit(uint32_t port, uint32_t packet);
  // Whether the port has a packet waiting or a host stack with cells to send.
  bool HasWork(const Port& pt) const;
  void SendPause(const Switch& sw, uint32_t global_port, bool pause);
  void RedMark(const Port& pt, Packet& p, Random& rng);
  bool IsHostNode(uint32_t node) const { return node < hosts_; }
  // An event at another node: into this queue, or handed over to the partition that owns it.
  void ScheduleAt(TimeNs at, uint32_t node, EventKind kind, uint32_t a, uint32_t b = 0);

  FabricConfig config_;
  uint32_t hosts_;
  uint32_t leaves_;
  EventQueue* events_;
  std::vector<Random> switch_rng_;  // by switch: RED's draws
  Stats* stats_;
  const Partitioning* partitioning_ = nullptr;
  Exchange* exchange_ = nullptr;
  uint64_t window_ = 0;
  HostStack* stack_ = nullptr;
  PacketPool packets_;
  std::vector<Port> ports_;
  std::vector<uint32_t> host_port_;  // by host
  std::vector<uint32_t> host_slot_;  // by host: its down-port index on its leaf
  std::vector<uint32_t> host_leaf_;
  std::vector<Switch> switches_;  // leaves, then spines; node id = hosts + index
};

}  // namespace bx::sim
