// PollPolicy: whether an I/O thread that found no work keeps polling or sleeps (issue 22).
//
// Polling costs CPU for as long as it lasts; sleeping costs a CQ arm, an epoll_wait and a
// wake-up (CPU on both sides, and the wake-up's latency). Which is cheaper depends on how long
// the thread would wait, so the policy predicts that from the gaps it has seen: an idle gap runs
// from the first pass that found no work to the next pass that found some, whether polling or a
// wake-up ended it. Fixed polls for `max_spin_ns` after every piece of work (the old behaviour).
// Adaptive polls only while the predicted gap is short (at most `spin_limit_ns`, about what a
// sleep and wake-up cost), for up to twice the prediction; otherwise it sleeps at once. The
// prediction corrects itself both ways: a gap that outlasts the polling ends in a sleep and is
// measured as long, and short gaps measured after sleeps bring polling back.
//
// Single-threaded (the I/O thread owns it) but for the counters; times are steady-clock
// nanoseconds.
#pragma once

#include <cstdint>

#include "base/single_writer_counter.h"

namespace bx::engine {

struct PollPolicyOptions {
  bool adaptive = true;
  uint64_t max_spin_ns = 200'000;   // the longest polling stretch, either mode
  uint64_t spin_limit_ns = 20'000;  // adaptive: poll only when the predicted gap is this or less
};

class PollPolicy {
 public:
  explicit PollPolicy(const PollPolicyOptions& options) : options_(options) {}

  // A pass found work; ends the idle gap under way, if any.
  void OnWork(uint64_t now_ns);
  // A pass found no work: true to poll again, false to sleep. The first call after work starts a
  // gap and fixes how long this gap may be polled.
  bool KeepPolling(uint64_t now_ns);

  // Adaptive: the expected idle gap, nanoseconds (0 before any gap was seen).
  uint64_t predicted_gap_ns() const { return predicted_ns_; }
  // Gaps ended while polling, gaps polled to the end of their budget, gaps slept at once.
  // Any thread may read these.
  uint64_t polled_gaps() const { return polled_gaps_.Get(); }
  uint64_t outlasted_gaps() const { return outlasted_gaps_.Get(); }
  uint64_t slept_gaps() const { return slept_gaps_.Get(); }

 private:
  uint64_t Budget() const;

  PollPolicyOptions options_;
  uint64_t predicted_ns_ = 0;
  uint64_t idle_since_ = 0;    // 0: not idle
  uint64_t spin_until_ = 0;    // polling ends here in the gap under way
  bool budget_spent_ = false;  // the gap under way stopped polling (counted once)
  SingleWriterCounter polled_gaps_, outlasted_gaps_, slept_gaps_;
};

}  // namespace bx::engine
