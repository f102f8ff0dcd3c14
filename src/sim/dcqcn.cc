#include "sim/dcqcn.h"

#include <algorithm>
#include <cmath>

namespace bx::sim {

double DcqcnRate::RateAt(TimeNs now) {
  if (seen_cnp_) Advance(now);
  return rate_mbps_;
}

void DcqcnRate::OnCnp(TimeNs now) {
  if (!seen_cnp_) {
    // First CNP: alpha starts at 1, the timers start, the first decrease is one check away.
    seen_cnp_ = true;
    origin_ = now;
    alpha_ = 1;
    alpha_ticks_ = 0;
    alpha_cnp_arrived_ = false;
    target_mbps_ = rate_mbps_;
    decrease_pending_ = true;
    decrease_at_ = origin_ + 1 + config_->decrease_interval_ns;
    return;
  }
  Advance(now);
  AdvanceAlpha(now);
  alpha_cnp_arrived_ = true;
  if (!decrease_pending_) {
    decrease_pending_ = true;
    // The first decrease check strictly after now.
    TimeNs phase = origin_ + 1;
    int64_t k = now < phase ? 1 : (now - phase) / config_->decrease_interval_ns + 1;
    decrease_at_ = phase + k * config_->decrease_interval_ns;
  }
}

void DcqcnRate::Advance(TimeNs now) {
  for (;;) {
    TimeNs next_decrease = decrease_pending_ ? decrease_at_ : INT64_MAX;
    TimeNs next_increase = increase_armed_ ? increase_at_ : INT64_MAX;
    TimeNs next = std::min(next_decrease, next_increase);
    if (next > now) return;
    if (next_increase < next_decrease) {
      Increase();
      increase_at_ += config_->increase_interval_ns;
    } else {
      Decrease(next_decrease);
    }
  }
}

void DcqcnRate::AdvanceAlpha(TimeNs to) {
  int64_t ticks = (to - origin_) / config_->alpha_interval_ns;
  int64_t n = ticks - alpha_ticks_;
  if (n <= 0) return;
  double keep = 1 - config_->g;
  if (alpha_cnp_arrived_) {
    alpha_ = keep * alpha_ + config_->g;
    alpha_cnp_arrived_ = false;
    --n;
  }
  if (n > 0) alpha_ *= std::pow(keep, double(n));
  alpha_ticks_ = ticks;
}

void DcqcnRate::Decrease(TimeNs at) {
  AdvanceAlpha(at);
  // HPCC's default (no target clamp): the target follows the rate only once recovery has begun.
  if (stage_ != 0) target_mbps_ = rate_mbps_;
  rate_mbps_ = std::max(config_->min_rate_mbps, rate_mbps_ * (1 - alpha_ / 2));
  stage_ = 0;
  decrease_pending_ = false;
  increase_armed_ = true;
  increase_at_ = at + config_->increase_interval_ns;
  ++cuts_;
}

void DcqcnRate::Increase() {
  double scale = line_mbps_ / 25000.0;
  if (stage_ == config_->fast_recovery_steps) {
    target_mbps_ += config_->rate_ai_mbps * scale;
  } else if (stage_ > config_->fast_recovery_steps) {
    target_mbps_ += config_->rate_hai_mbps * scale;
  }
  target_mbps_ = std::min(target_mbps_, line_mbps_);
  rate_mbps_ = (rate_mbps_ + target_mbps_) / 2;
  ++stage_;
  // Back at line rate: later ticks change nothing, so the timer may stop (saves work).
  if (target_mbps_ >= line_mbps_ && line_mbps_ - rate_mbps_ < 1e-3) {
    rate_mbps_ = line_mbps_;
    increase_armed_ = false;
  }
}

}  // namespace bx::sim
