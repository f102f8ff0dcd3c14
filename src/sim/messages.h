// Application messages of the simulated workload, pooled and named by index. A message is freed
// once both ends are done with it: delivered at the receiver and completed at the sender.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/config.h"

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

class MessageTable {
 public:
  uint32_t Create(const Message& m) {
    uint32_t id;
    if (free_.empty()) {
      id = uint32_t(messages_.size());
      messages_.push_back(m);
    } else {
      id = free_.back();
      free_.pop_back();
      messages_[id] = m;
    }
    messages_[id].refs = 2;
    return id;
  }
  Message& operator[](uint32_t id) { return messages_[id]; }
  void Release(uint32_t id) {
    if (--messages_[id].refs == 0) free_.push_back(id);
  }
  size_t in_use() const { return messages_.size() - free_.size(); }
  // Calls f(message) for every message not yet freed.
  template <typename F>
  void ForEachLive(F f) const {
    for (const Message& m : messages_) {
      if (m.refs > 0) f(m);
    }
  }

 private:
  std::vector<Message> messages_;
  std::vector<uint32_t> free_;
};

// What a transport tells the workload.
class MessageSink {
 public:
  virtual ~MessageSink() = default;
  // The whole message is at the receiving application.
  virtual void OnDelivered(uint32_t message) = 0;
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
