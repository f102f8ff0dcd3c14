// PollPolicy: whether an I/O thread that found no work keeps polling or sleeps.
//
// Polling costs CPU for as long as it lasts; sleeping costs a CQ arm, an epoll_wait and a
// wake-up (CPU on both sides, and the wake-up's latency). Which is cheaper depends on how long
// the thread would wait. Fixed polls for `max_spin_ns` after every piece of work (the old
// behaviour). Adaptive predicts each wait from the earlier waits of its kind, and polls only
// while the prediction is short, for up to twice it; otherwise it sleeps at once:
// - A completion is on its way (the thread's engines have requests in flight or a rendezvous
//   under way): a NIC finishing a fragment is worth waiting for, so the limit is higher
//   (`completion_spin_limit_ns`). Such waits are long when the transfer is (a 1 MiB message with
//   no send window) or when the completion itself waits for a core: on a host whose cores are
//   all taken, I/O threads that poll through every wait for a completion keep the threads that
//   produce it (the peer's I/O thread, the simnic's hardware thread) off the cores, the waits
//   grow, and more polling follows (`bx bench rpc --rate 20000` stalled for 30-200 ms so).
// - Nothing is in flight: work can only come from outside (a peer's new message, a task), and
//   the limit is about what a sleep and wake-up cost (`spin_limit_ns`).
// A gap runs from the first pass that found no work to the next pass that found some, whether
// polling or a wake-up ended it. The predictions learn only from what polling saw: a gap that
// ends while polled counts as it was, one that outlasts its polling counts as long, one slept
// through at once not at all (its measured length includes the wake-up's latency). So while
// sleeping, one gap in 16 of each kind is polled for its limit anyway, and short gaps found so
// bring polling back.
//
// Contention: polling yields the core after every empty pass, which is free while the thread has
// the core to itself. When other busy threads share it, the kernel (EEVDF) sends a yielding
// thread to the back for a whole slice (about a millisecond or more), and a completion that
// arrives meanwhile waits for it. A pass that took far longer than a pass takes says so
// (OnEmptyPass); the thread then sleeps at once for every gap of the next `contended_ns`, since a
// sleeping thread is woken at once when its completion arrives, and polls again after that. On a
// host that stays busy (a trainer using every core) each such probe loses a slice again, so a
// slow pass soon after a contended stretch ended doubles the next stretch, up to
// `max_contended_ns`: one lost slice per stretch, not one per 5 ms (with two CPU hogs, a fixed
// 5 ms stretch lost ~4 ms in every 9 and p99 sat at the slice, 4 ms).
// The thread's own scheduler statistics say the same without a yield having to lose a slice
// first (OnSchedStat, base/thread_sched_stat.h): when its turns on a CPU came after a mean wait
// of `oversubscribed_wait_ns` or more over a window, threads that do not yield share its core,
// and a contended stretch starts as for a slow pass. Waits behind our own threads (the peer's
// I/O thread, the simnic's hardware thread on a 2-core host) are microseconds a turn, and
// streaming, which keeps every thread of ours busy, does not count as contention.
//
// Single-threaded (the I/O thread owns it) but for the counters; times are steady-clock
// nanoseconds.
#pragma once

#include <cstdint>

#include "base/single_writer_counter.h"

namespace bx {

struct PollPolicyOptions {
  bool adaptive = true;
  uint64_t max_spin_ns = 200'000;   // the longest polling stretch, either mode
  uint64_t spin_limit_ns = 20'000;  // adaptive: poll only when the predicted gap is this or less
  // The same for waits with a completion in flight: sleeping adds a wake-up's latency (about
  // 12 us on this project's 2-core VMs) to the transfer, which a wait this long can afford.
  uint64_t completion_spin_limit_ns = 50'000;
  // An empty pass longer than this means another thread had the core: sleep for contended_ns.
  // A millisecond is longer than our own threads keep a core between yields, and shorter than
  // the slice a yield loses to a busy thread; measured with `bx bench rpc --cpu-hogs 2`.
  uint64_t slow_pass_ns = 1'000'000;
  uint64_t contended_ns = 5'000'000;
  uint64_t max_contended_ns = 640'000'000;
  // A window's mean wait per turn on a CPU at or above this means busy threads share the core.
  uint64_t oversubscribed_wait_ns = 250'000;
  // Off: neither slow passes nor waits for a CPU start a contended stretch (the earlier policy,
  // kept to show what it costs beside busy threads: engine/tests/io_thread_test.cc).
  bool detect_contention = true;
};

class PollPolicy {
 public:
  explicit PollPolicy(const PollPolicyOptions& options);

  // A pass found work; ends the idle gap under way, if any.
  void OnWork(uint64_t now_ns);
  // A pass found no work: true to poll again, false to sleep. The first call after work starts a
  // gap and fixes how long it may be polled; `completion_expected` is read then (it cannot change
  // before the next work).
  bool KeepPolling(uint64_t now_ns, bool completion_expected = false);
  // An empty polling pass (poll and yield) began at `start_ns` and ended at `now_ns`. When it took
  // longer than slow_pass_ns the core is contended: the gap under way and every gap for the next
  // contended_ns are slept through.
  void OnEmptyPass(uint64_t start_ns, uint64_t now_ns);
  // Over a window ending at `now_ns` the thread waited `waited_ns` for a CPU before `turns` turns
  // on one (schedstat deltas): a mean wait of oversubscribed_wait_ns or more starts a contended
  // stretch, as a slow pass does.
  void OnSchedStat(uint64_t now_ns, uint64_t waited_ns, uint64_t turns);

  // Adaptive: the expected idle gap with nothing in flight, nanoseconds (0 before any was seen).
  uint64_t predicted_gap_ns() const { return idle_.predicted_ns; }
  // Adaptive: the expected wait for a completion in flight (0 before any was seen).
  uint64_t predicted_completion_ns() const { return completion_.predicted_ns; }
  // Gaps ended while polling, gaps polled to the end of their budget, gaps slept at once.
  // Any thread may read these.
  uint64_t polled_gaps() const { return polled_gaps_.Get(); }
  uint64_t outlasted_gaps() const { return outlasted_gaps_.Get(); }
  uint64_t slept_gaps() const { return slept_gaps_.Get(); }
  // Slow passes seen (each starts or extends a contended stretch).
  uint64_t slow_passes() const { return slow_passes_.Get(); }
  // Windows whose waits for a CPU said the core is shared with busy threads (each starts or
  // extends a contended stretch).
  uint64_t oversubscribed_windows() const { return oversubscribed_windows_.Get(); }
  // Contended stretches begun (a slow pass or window within one extends it, not counted again).
  uint64_t contended_stretches() const { return contended_stretches_.Get(); }

 private:
  // What the policy knows of one kind of wait.
  struct Kind {
    uint64_t limit_ns = 0;            // polled only while predicted_ns is this or less
    uint64_t predicted_ns = 0;        // 0: none seen yet
    uint64_t sleeps_since_probe = 0;  // gaps of this kind slept at once since one was polled
  };
  uint64_t Budget(uint64_t now_ns, const Kind& kind) const;
  void Contended(uint64_t now_ns);
  void Learn(Kind& kind, uint64_t gap);

  PollPolicyOptions options_;
  Kind idle_, completion_;
  uint64_t idle_since_ = 0;        // 0: not idle
  uint64_t spin_until_ = 0;        // polling ends here in the gap under way
  bool budget_spent_ = false;      // the gap under way stopped polling (counted once)
  bool gap_expected_ = false;      // the gap under way waits for a completion in flight
  bool unmeasured_ = false;        // the gap under way teaches nothing (slept at once, slow)
  uint64_t contended_until_ = 0;   // gaps starting before this are slept through
  uint64_t contended_stretch_ns_;  // the length of the last contended stretch
  SingleWriterCounter polled_gaps_, outlasted_gaps_, slept_gaps_, slow_passes_,
      oversubscribed_windows_, contended_stretches_;
};

}  // namespace bx
