#include "base/poll_policy.h"

#include <algorithm>

namespace bx {
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

PollPolicy::PollPolicy(const PollPolicyOptions& options)
    : options_(options), contended_stretch_ns_(options.contended_ns) {
  idle_.limit_ns = options.spin_limit_ns;
  completion_.limit_ns = options.completion_spin_limit_ns;
}

uint64_t PollPolicy::Budget(uint64_t now_ns, const Kind& kind) const {
  if (now_ns < contended_until_) return 0;
  if (!options_.adaptive) return options_.max_spin_ns;
  // No gap seen yet: poll for the limit, which a first gap then either confirms or not.
  if (kind.predicted_ns == 0) return std::min(options_.max_spin_ns, kind.limit_ns);
  if (kind.predicted_ns > kind.limit_ns) {
    return kind.sleeps_since_probe + 1 >= kProbeEvery
               ? std::min(options_.max_spin_ns, kind.limit_ns)
               : 0;
  }
  return std::min(options_.max_spin_ns, std::max(2 * kind.predicted_ns, kMinBudgetNs));
}

void PollPolicy::Learn(Kind& kind, uint64_t gap) {
  // A gap that outlasted its polling was long (how long, the wake-up's latency hides).
  const uint64_t cap = kCapInLimits * kind.limit_ns;
  const uint64_t sample = budget_spent_ ? cap : std::min(gap, cap);
  if (kind.predicted_ns == 0) {
    kind.predicted_ns = std::max<uint64_t>(sample, 1);
    return;
  }
  // predicted += (sample - predicted) / 4, in unsigned arithmetic.
  kind.predicted_ns =
      kind.predicted_ns - (kind.predicted_ns >> kWeightShift) + (sample >> kWeightShift);
  kind.predicted_ns = std::max<uint64_t>(kind.predicted_ns, 1);
}

void PollPolicy::OnWork(uint64_t now_ns) {
  if (idle_since_ == 0) return;
  const uint64_t gap = now_ns - idle_since_;
  idle_since_ = 0;
  if (!budget_spent_) polled_gaps_.Add();
  // A gap slept through at once says nothing: its length includes the wake-up's latency.
  if (unmeasured_) return;
  Learn(gap_expected_ ? completion_ : idle_, gap);
}

bool PollPolicy::KeepPolling(uint64_t now_ns, bool completion_expected) {
  if (idle_since_ == 0) {
    idle_since_ = std::max<uint64_t>(now_ns, 1);
    budget_spent_ = false;
    unmeasured_ = false;
    gap_expected_ = completion_expected;
    Kind& kind = completion_expected ? completion_ : idle_;
    const uint64_t budget = Budget(now_ns, kind);
    spin_until_ = now_ns + budget;
    kind.sleeps_since_probe = budget == 0 ? kind.sleeps_since_probe + 1 : 0;
    if (budget == 0) {
      budget_spent_ = true;
      unmeasured_ = true;
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
  if (!options_.detect_contention || now_ns - start_ns <= options_.slow_pass_ns) return;
  slow_passes_.Add();
  Contended(now_ns);
}

void PollPolicy::OnSchedStat(uint64_t now_ns, uint64_t waited_ns, uint64_t turns) {
  if (!options_.detect_contention || turns == 0) return;
  if (waited_ns / turns < options_.oversubscribed_wait_ns) return;
  oversubscribed_windows_.Add();
  Contended(now_ns);
}

void PollPolicy::Contended(uint64_t now_ns) {
  // Contended again within a stretch's length of the last one ending: the host is still busy.
  const bool again = contended_until_ != 0 && now_ns < contended_until_ + contended_stretch_ns_;
  if (now_ns >= contended_until_) contended_stretches_.Add();
  contended_stretch_ns_ = again ? std::min(2 * contended_stretch_ns_, options_.max_contended_ns)
                                : options_.contended_ns;
  contended_until_ = now_ns + contended_stretch_ns_;
  if (idle_since_ != 0 && !budget_spent_) {
    budget_spent_ = true;
    outlasted_gaps_.Add();
  }
  // The gap's length is the contention's, which the contended stretch answers: not a sample.
  unmeasured_ = true;
}

}  // namespace bx
