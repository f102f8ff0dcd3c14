#include "engine/poll_policy.h"

#include <algorithm>

namespace bx::engine {
namespace {

// The prediction is an exponentially weighted mean of the gaps (weight 1/4 for the newest), so
// a change of traffic shows within a few gaps. A gap enters it capped at two spin limits: one
// long idle stretch then needs only a few short gaps to bring polling back.
constexpr int kWeightShift = 2;
constexpr uint64_t kCapInLimits = 2;
// A gap slept through teaches nothing (its length includes the wake-up's latency), so once
// sleeping, the policy would never see short gaps again. Every this many slept gaps, one is
// polled for the spin limit instead: a probe that measures the gap as it is.
constexpr uint64_t kProbeEvery = 16;
// The shortest polling stretch worth starting (a pass costs about a microsecond with its yield).
constexpr uint64_t kMinBudgetNs = 2'000;

}  // namespace

uint64_t PollPolicy::Budget(uint64_t now_ns, bool completion_expected) const {
  if (now_ns < contended_until_) return 0;
  if (!options_.adaptive || completion_expected) return options_.max_spin_ns;
  // No gap seen yet: poll for the limit, which a first gap then either confirms or not.
  if (predicted_ns_ == 0) return std::min(options_.max_spin_ns, options_.spin_limit_ns);
  if (predicted_ns_ > options_.spin_limit_ns) {
    return sleeps_since_probe_ + 1 >= kProbeEvery
               ? std::min(options_.max_spin_ns, options_.spin_limit_ns)
               : 0;
  }
  return std::min(options_.max_spin_ns, std::max(2 * predicted_ns_, kMinBudgetNs));
}

void PollPolicy::OnWork(uint64_t now_ns) {
  if (idle_since_ == 0) return;
  const uint64_t gap = now_ns - idle_since_;
  idle_since_ = 0;
  if (!budget_spent_) polled_gaps_.Add();
  // The prediction is for waits with nothing in flight, and learns only what polling saw: a gap
  // that ended while polled is measured as it was; one that outlasted its polling was long (how
  // long, the wake-up's latency hides); one slept through at once says nothing.
  if (gap_expected_ || slept_at_once_) return;
  const uint64_t cap = kCapInLimits * options_.spin_limit_ns;
  const uint64_t sample = budget_spent_ ? cap : std::min(gap, cap);
  if (predicted_ns_ == 0) {
    predicted_ns_ = std::max<uint64_t>(sample, 1);
  } else {
    // predicted += (sample - predicted) / 4, in unsigned arithmetic.
    predicted_ns_ = predicted_ns_ - (predicted_ns_ >> kWeightShift) + (sample >> kWeightShift);
    predicted_ns_ = std::max<uint64_t>(predicted_ns_, 1);
  }
}

bool PollPolicy::KeepPolling(uint64_t now_ns, bool completion_expected) {
  if (idle_since_ == 0) {
    idle_since_ = std::max<uint64_t>(now_ns, 1);
    budget_spent_ = false;
    slept_at_once_ = false;
    gap_expected_ = completion_expected;
    const uint64_t budget = Budget(now_ns, completion_expected);
    spin_until_ = now_ns + budget;
    if (!completion_expected) sleeps_since_probe_ = budget == 0 ? sleeps_since_probe_ + 1 : 0;
    if (budget == 0) {
      budget_spent_ = true;
      slept_at_once_ = true;
      slept_gaps_.Add();
      return false;
    }
  }
  if (budget_spent_) return false;
  if (now_ns < spin_until_) return true;
  budget_spent_ = true;
  outlasted_gaps_.Add();
  return false;
}

void PollPolicy::OnEmptyPass(uint64_t start_ns, uint64_t now_ns) {
  if (now_ns - start_ns <= options_.slow_pass_ns) return;
  slow_passes_.Add();
  contended_until_ = now_ns + options_.contended_ns;
  if (idle_since_ != 0 && !budget_spent_) {
    budget_spent_ = true;
    outlasted_gaps_.Add();
  }
}

}  // namespace bx::engine
