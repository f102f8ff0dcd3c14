// A run split into partitions (simulation.cc): which partition owns each node, and the events one
// partition schedules for another's nodes until they next meet. A partition is a copy of the whole
// model that handles only its own nodes' events; nodes of different partitions meet only through
// links, whose delay (at least the link delay) is the lookahead that lets partitions run a window
// of time in parallel.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/event_heap.h"
#include "sim/packet.h"

namespace bx::sim {

struct Partitioning {
  uint32_t self = 0;
  std::vector<uint8_t> of_node;  // by node (Network's ids); empty: one partition owns every node

  uint32_t Of(uint32_t node) const { return of_node.empty() ? 0 : of_node[node]; }
  bool Owns(uint32_t node) const { return Of(node) == self; }
};

// An event for another partition's node, with the packet it carries (kPacketArrive: the packet
// leaves the sender's pool and joins the receiver's).
struct Handover {
  Event event;
  Packet packet;
};

// Boxes of handovers and of message releases (MessageTable::ReleaseDelivered), one per (from, to)
// pair and window parity. In window k, `from` fills its boxes of parity k % 2; after the
// partitions meet, `to` empties those while everyone runs window k + 1 into the other parity.
// Nobody fills parity k % 2 again before all have met once more, so no box is ever touched by two
// threads at once.
class Exchange {
 public:
  explicit Exchange(uint32_t partitions)
      : partitions_(partitions), boxes_(2 * partitions * partitions) {}
  std::vector<Handover>& Box(uint32_t from, uint32_t to, uint64_t window) {
    return At(from, to, window).handovers;
  }
  std::vector<uint32_t>& Releases(uint32_t from, uint32_t to, uint64_t window) {
    return At(from, to, window).releases;
  }

 private:
  struct alignas(64) Padded {  // two threads' boxes never share a cache line
    std::vector<Handover> handovers;
    std::vector<uint32_t> releases;  // message ids owned by `to`
  };
  Padded& At(uint32_t from, uint32_t to, uint64_t window) {
    return boxes_[((window & 1) * partitions_ + from) * partitions_ + to];
  }
  uint32_t partitions_;
  std::vector<Padded> boxes_;
};

}  // namespace bx::sim
