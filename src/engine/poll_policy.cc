#include "engine/poll_policy.h"

#include <algorithm>

namespace bx::engine {
namespace {

// The prediction is an exponentially weighted mean of the gaps (weight 1/4 for the newest), so
// a change of traffic shows within a few gaps. A gap enters it capped at four spin limits: one
// long idle stretch then needs only a few short gaps to bring polling back.
constexpr int kWeightShift = 2;
constexpr uint64_t kCapInLimits = 4;
// The shortest polling stretch worth starting (a pass costs about a microsecond with its yield).
constexpr uint64_t kMinBudgetNs = 2'000;

}  // namespace

uint64_t PollPolicy::Budget() const {
  if (!options_.adaptive) return options_.max_spin_ns;
  // No gap seen yet: poll for the limit, which a first gap then either confirms or not.
  if (predicted_ns_ == 0) return std::min(options_.max_spin_ns, options_.spin_limit_ns);
  if (predicted_ns_ > options_.spin_limit_ns) return 0;
  return std::min(options_.max_spin_ns, std::max(2 * predicted_ns_, kMinBudgetNs));
}

void PollPolicy::OnWork(uint64_t now_ns) {
  if (idle_since_ == 0) return;
  const uint64_t gap = now_ns - idle_since_;
  if (!budget_spent_) polled_gaps_.Add();
  idle_since_ = 0;
  const uint64_t sample = std::min(gap, kCapInLimits * options_.spin_limit_ns);
  if (predicted_ns_ == 0) {
    predicted_ns_ = std::max<uint64_t>(sample, 1);
  } else {
    // predicted += (sample - predicted) / 4, in unsigned arithmetic.
    predicted_ns_ = predicted_ns_ - (predicted_ns_ >> kWeightShift) + (sample >> kWeightShift);
    predicted_ns_ = std::max<uint64_t>(predicted_ns_, 1);
  }
}

bool PollPolicy::KeepPolling(uint64_t now_ns) {
  if (idle_since_ == 0) {
    idle_since_ = std::max<uint64_t>(now_ns, 1);
    budget_spent_ = false;
    const uint64_t budget = Budget();
    spin_until_ = now_ns + budget;
    if (budget == 0) {
      budget_spent_ = true;
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

}  // namespace bx::engine
