// Packets live in one pool and are named by index; a port queue is an intrusive FIFO through
// Packet::next, so enqueue and dequeue never allocate.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/config.h"
#include "sim/huge_page_allocator.h"

namespace bx::sim {

constexpr uint32_t kNoPacket = UINT32_MAX;

enum class PacketType : uint8_t {
  kRdmaData,  // a cell of an RDMA work request (lossless class)
  kRdmaAck,   // NIC-generated acknowledgement of a whole work request (control class)
  kCnp,       // congestion notification (control class)
  kTcpData,   // lossy class
  kTcpAck,    // control class
};

struct Packet {
  uint32_t next;
  uint32_t wire_bytes;
  uint32_t src_host;
  uint32_t dst_host;
  uint32_t flow;     // RDMA: endpoint id at the sender; TCP: connection endpoint at the sender
  uint32_t ref;      // RDMA: work request id; TCP: payload bytes
  uint64_t seq;      // TCP: stream offset (data) or cumulative ack
  uint32_t at_port;  // global port id the packet arrives on (next hop)
  uint16_t in_port;  // local ingress port index at the switch currently holding it
  // RDMA, last cell: what the receiver learns of the work request from the wire (its opcode,
  // immediate data or SEND payload), so it never reads the sender's memory.
  uint16_t credits = 0;  // piggybacked credit return
  uint32_t message = 0;  // the sender's message id (on an ACK: a hint for prefetching only)
  PacketType type;
  bool ecn = false;
  bool last = false;   // last cell of its work request
  bool ece = false;    // TCP ack: echo of an ECN mark
  uint8_t op = 0;      // RdmaStack's Op
  uint8_t what = 0;    // RdmaStack's What
  uint8_t kind = 0;    // MessageKind of an application message
  TimeNs started = 0;  // application message: Delivery::started

  bool control() const {
    return type == PacketType::kRdmaAck || type == PacketType::kCnp || type == PacketType::kTcpAck;
  }
  bool lossless() const { return type == PacketType::kRdmaData; }
};

static_assert(sizeof(Packet) == 64, "a packet is one cache line");

class PacketPool {
 public:
  uint32_t Allocate() {
    if (free_.empty()) {
      packets_.emplace_back();
      return uint32_t(packets_.size() - 1);
    }
    uint32_t id = free_.back();
    free_.pop_back();
    packets_[id] = Packet{};
    return id;
  }
  void Free(uint32_t id) { free_.push_back(id); }
  Packet& operator[](uint32_t id) { return packets_[id]; }
  const Packet& at_unchecked(uint32_t id) const { return packets_[id]; }
  size_t in_use() const { return packets_.size() - free_.size(); }

 private:
  std::vector<Packet, HugePageAllocator<Packet>> packets_;
  std::vector<uint32_t> free_;
};

struct PacketFifo {
  uint32_t head = kNoPacket;
  uint32_t tail = kNoPacket;

  bool empty() const { return head == kNoPacket; }
  void Push(PacketPool& pool, uint32_t id) {
    pool[id].next = kNoPacket;
    if (tail == kNoPacket) {
      head = id;
    } else {
      pool[tail].next = id;
    }
    tail = id;
  }
  uint32_t Pop(PacketPool& pool) {
    uint32_t id = head;
    head = pool[id].next;
    if (head == kNoPacket) tail = kNoPacket;
    return id;
  }
};

}  // namespace bx::sim
