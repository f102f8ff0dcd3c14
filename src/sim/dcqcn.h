// DCQCN at the sender NIC, Mellanox variant (as in HPCC's rdma-hw.cc; DCQCN paper, Zhu et al.
// 2015), with every timer evaluated lazily from elapsed time.
//
// The hardware runs three periodic timers per QP once it has seen a CNP: alpha update (every
// alpha_interval), rate-decrease check (every decrease_interval) and rate increase (every
// increase_interval after the last cut). As events, 43,000 QPs would cost hundreds of millions of
// events per simulated second. Here the state is brought up to date only when it is needed (a
// packet is about to leave, or a CNP arrives) by replaying the ticks that fell in between, in
// order, in closed form where possible. A QP that never saw a CNP costs nothing.
//
// Tick times: with t0 the first CNP, alpha ticks at t0 + k*alpha_interval (k >= 1) and decrease
// checks at t0 + 1ns + k*decrease_interval, so a decrease at the same instant follows the alpha
// update (as HPCC orders them). Single-threaded.
#pragma once

#include <cstdint>

#include "sim/config.h"

namespace bx::sim {

class DcqcnRate {
 public:
  DcqcnRate() = default;
  DcqcnRate(const DcqcnConfig* config, double line_rate_mbps)
      : config_(config),
        line_mbps_(line_rate_mbps),
        rate_mbps_(line_rate_mbps),
        target_mbps_(line_rate_mbps) {}

  // The sending rate at `now` (Mb/s), after replaying all timer ticks up to `now`.
  double RateAt(TimeNs now);
  // A CNP for this QP arrived at `now`.
  void OnCnp(TimeNs now);

  double alpha() const { return alpha_; }
  double target_mbps() const { return target_mbps_; }
  uint64_t cuts() const { return cuts_; }

 private:
  void Advance(TimeNs now);
  void AdvanceAlpha(TimeNs to);
  void Decrease(TimeNs at);
  void Increase();

  const DcqcnConfig* config_ = nullptr;
  double line_mbps_ = 0;
  double rate_mbps_ = 0;
  double target_mbps_ = 0;
  double alpha_ = 1;
  bool seen_cnp_ = false;
  bool alpha_cnp_arrived_ = false;
  bool decrease_pending_ = false;
  TimeNs origin_ = 0;        // first CNP: the phase of the alpha and decrease timers
  int64_t alpha_ticks_ = 0;  // alpha ticks already applied
  TimeNs decrease_at_ = 0;   // when the pending decrease check fires
  bool increase_armed_ = false;
  TimeNs increase_at_ = 0;
  uint32_t stage_ = 0;  // increase ticks since the last cut
  uint64_t cuts_ = 0;
};

}  // namespace bx::sim
