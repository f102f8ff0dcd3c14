// Application messages of the simulated workload, pooled and named by index. A message is freed
// once both ends are done with it: delivered at the receiver and completed at the sender.
//
// A partitioned run (simulation.cc) has one table per partition, holding the messages its hosts
// send; an id names its table in the top bits. The receiver learns what it needs from the wire
// (Delivery) and, when the message belongs to another partition, its release waits in the table
// until the run hands it to the owner (simulation.cc, through the Exchange).
#pragma once

#include <cassert>
#include <cstdint>
#include <vector>

#include "sim/config.h"
#include "sim/huge_page_allocator.h"

namespace bx::sim {

constexpr uint32_t kNoMessage = UINT32_MAX;

enum class MessageKind : uint8_t {
  kPush,
  kFetchRequest,
  kFetchResponse,
  kVictimPush,  // victim client -> cold server
  kVictimFetchRequest,
  kVictimFetchResponse,
};

struct Message {
  uint32_t next = kNoMessage;  // intrusive queue link, owned by the transport
  uint32_t bytes = 0;
  uint32_t posted = 0;        // RDMA: payload bytes handed to the NIC so far
  uint32_t from = 0, to = 0;  // hosts
  TimeNs enqueued = 0;        // when the application sent it
  TimeNs origin = 0;          // fetch response: when the trainer asked for it
  uint64_t stream_end = 0;    // TCP: stream offset just past its last byte
  MessageKind kind = MessageKind::kPush;
  uint8_t state = 0;  // transport-private
  uint8_t refs = 0;
  bool delivered = false;  // the receiving application has it (set by the workload)
};

inline bool IsResponse(MessageKind kind) {
  return kind == MessageKind::kFetchResponse || kind == MessageKind::kVictimFetchResponse;
}

// What the receiving application learns of a message (from the wire, or from the table).
struct Delivery {
  uint32_t message = kNoMessage;  // the sender's id, for MessageTable::ReleaseDelivered
  uint32_t from = 0, to = 0;
  // When the exchange began: a response's origin (its request was sent), else the message's
  // enqueued time.
  TimeNs started = 0;
  MessageKind kind = MessageKind::kPush;
};

inline TimeNs StartedAt(const Message& m) {
  return IsResponse(m.kind) ? m.origin : m.enqueued;
}

class MessageTable {
 public:
  static constexpr int kIndexBits = 24;  // messages alive per partition; partitions above
  explicit MessageTable(uint32_t partition = 0) : partition_(partition) {}

  uint32_t Create(const Message& m) {
    uint32_t index;
    if (free_.empty()) {
      index = uint32_t(messages_.size());
      assert(index < (1u << kIndexBits));
      messages_.push_back(m);
    } else {
      index = free_.back();
      free_.pop_back();
      messages_[index] = m;
    }
    messages_[index].refs = 2;
    return (partition_ << kIndexBits) | index;
  }
  // Only the owning partition reads a message.
  Message& operator[](uint32_t id) {
    assert(Owner(id) == partition_);
    return messages_[id & kIndexMask];
  }
  Delivery DeliveryOf(uint32_t id) {
    const Message& m = (*this)[id];
    return Delivery{id, m.from, m.to, StartedAt(m), m.kind};
  }
  void Release(uint32_t id) {
    Message& m = (*this)[id];
    if (--m.refs == 0) free_.push_back(id & kIndexMask);
  }
  // The receiving application has the message: marks it delivered and drops the receiver's
  // reference, now if this table owns it, else once the owner is handed remote_releases().
  void ReleaseDelivered(uint32_t id) {
    if (Owner(id) != partition_) {
      remote_releases_.push_back(id);
      return;
    }
    (*this)[id].delivered = true;
    Release(id);
  }
  static uint32_t Owner(uint32_t id) { return id >> kIndexBits; }
  // Speed only: starts loading a message of this table, if `id` names one.
  void Prefetch(uint32_t id) const {
    if (Owner(id) == partition_ && (id & kIndexMask) < messages_.size()) {
      __builtin_prefetch(&messages_[id & kIndexMask]);
    }
  }
  // Releases of other partitions' messages, for the run to hand over (and clear).
  std::vector<uint32_t>& remote_releases() { return remote_releases_; }

  size_t in_use() const { return messages_.size() - free_.size(); }
  // Calls f(message) for every message not yet freed.
  template <typename F>
  void ForEachLive(F f) const {
    for (const Message& m : messages_) {
      if (m.refs > 0) f(m);
    }
  }

 private:
  static constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;
  uint32_t partition_;
  std::vector<Message, HugePageAllocator<Message>> messages_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> remote_releases_;
};

// What a transport tells the workload.
class MessageSink {
 public:
  virtual ~MessageSink() = default;
  // The whole message is at the receiving application. The sink releases it
  // (MessageTable::ReleaseDelivered).
  virtual void OnDelivered(const Delivery& delivery) = 0;
  // The sender learnt the message is acknowledged (its buffer may be reused).
  virtual void OnSendCompleted(uint32_t message) = 0;
};

// What the workload asks of a transport.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual uint32_t Send(uint32_t from, uint32_t to, MessageKind kind, uint32_t bytes,
                        TimeNs origin) = 0;
};

}  // namespace bx::sim
