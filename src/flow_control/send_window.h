// SendWindow: the per-engine software bound on outstanding bytes (paper sections 4 and 6.3).
//
// Receive credits protect the peer's receive queue; they say nothing about the fabric. During an
// incast many engines each hold a few credits' worth of data in flight, and their sum overflows
// switch buffers even though every flow alone is small. The window bounds what one engine has
// posted and not yet seen completed, in bytes, so the sum over N senders is at most N x W.
//
// Rule: a request of `bytes` may be posted when nothing is outstanding (so one request larger than
// W still goes, alone) or when outstanding + bytes <= W. A limit of 0 turns the window off.
//
// No verbs in here: the engine and the fabric simulator drive this same class. Single-threaded.
#pragma once

#include <cassert>
#include <cstdint>

namespace bx::flow_control {

class SendWindow {
 public:
  // `limit_bytes` = W; 0 means unbounded.
  explicit SendWindow(uint64_t limit_bytes) : limit_(limit_bytes) {}

  uint64_t limit() const { return limit_; }
  bool enabled() const { return limit_ != 0; }
  uint64_t outstanding() const { return outstanding_; }
  // The largest outstanding byte count ever reached.
  uint64_t max_outstanding() const { return max_outstanding_; }
  // Times a request had to wait for the window (counted by NoteStall, once per wait).
  uint64_t stalls() const { return stalls_; }

  bool CanPost(uint64_t bytes) const {
    return !enabled() || outstanding_ == 0 || outstanding_ + bytes <= limit_;
  }

  void OnPosted(uint64_t bytes) {
    // Checked on every post in debug builds: the bound is the point of the class.
    assert(CanPost(bytes));
    outstanding_ += bytes;
    if (outstanding_ > max_outstanding_) max_outstanding_ = outstanding_;
  }

  void OnCompleted(uint64_t bytes) {
    assert(bytes <= outstanding_);
    outstanding_ -= bytes;
  }

  // Every outstanding request is gone (the QP failed): nothing is in flight any more.
  void Reset() { outstanding_ = 0; }

  void NoteStall() { ++stalls_; }

 private:
  uint64_t limit_;
  uint64_t outstanding_ = 0;
  uint64_t max_outstanding_ = 0;
  uint64_t stalls_ = 0;
};

}  // namespace bx::flow_control
