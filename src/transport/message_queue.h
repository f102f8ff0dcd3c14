// MessageQueue: the messages a socket without on_message holds for Socket::Receive().
//
// Threads: Push and Close are called by the socket's I/O thread; Pop by any number of application
// threads. All methods are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "bx/buffer.h"
#include "bx/status.h"

namespace bx::transport {

class MessageQueue {
 public:
  // Appends a received message and wakes one waiting Pop. Ignored after Close.
  void Push(Buffer message);
  // Records why the socket ended (non-OK); Pop returns it once the queue has drained.
  void Close(Status reason);
  // The oldest message; DeadlineExceeded after `timeout`; the close reason once closed and empty.
  Result<Buffer> Pop(std::chrono::milliseconds timeout);
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Buffer> messages_;
  Status close_reason_;  // OK while open
};

}  // namespace bx::transport
