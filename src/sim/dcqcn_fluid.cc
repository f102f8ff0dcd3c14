#include "sim/dcqcn_fluid.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "sim/dispatch.h"
#include "sim/event_queue.h"
#include "sim/messages.h"
#include "sim/network.h"
#include "sim/random.h"
#include "sim/rdma_stack.h"
#include "sim/stats.h"

namespace bx::sim {
namespace {

// Accumulates the queue statistics of the measured stretch from samples of equal weight.
class QueueStats {
 public:
  void Add(double bytes) {
    sum_ += bytes;
    sum_squares_ += bytes * bytes;
    empty_ += bytes < 1 ? 1 : 0;
    ++samples_;
  }
  void Into(DcqcnFlowsResult* r) const {
    if (samples_ == 0) return;
    double n = double(samples_);
    r->queue_mean_bytes = sum_ / n;
    r->queue_sd_bytes =
        std::sqrt(std::max(0.0, sum_squares_ / n - r->queue_mean_bytes * r->queue_mean_bytes));
    r->queue_empty = double(empty_) / n;
  }

 private:
  double sum_ = 0, sum_squares_ = 0;
  uint64_t empty_ = 0, samples_ = 0;
};

// Drops what the flows deliver: they are longer than the run.
class NullSink : public MessageSink {
 public:
  void OnDelivered(const Delivery&) override {}
  void OnSendCompleted(uint32_t) override {}
};

// The expected rates (per ns, per flow) of the increase events of each stage, and the share of
// flows whose next cut also sets RT <- RC (an increase came since their last cut).
struct IncreaseRates {
  double fast = 0, additive = 0, hyper = 0;
  double increased_since_cut = 0;
};

// The paper's way: cuts a Poisson process at today's rate `lambda`, so each stage's increase
// events come at a fixed fraction of it (a timer period with no cut, then two, ...).
IncreaseRates StationaryIncreases(const DcqcnConfig& d, double lambda) {
  IncreaseRates r;
  const double x = lambda * double(d.increase_interval_ns);
  if (x < 1e-9) {
    r.hyper = 1 / double(d.increase_interval_ns);  // no cuts: past the additive stage
  } else {
    const double f = d.fast_recovery_steps;
    r.fast = lambda * (std::exp(-x) - std::exp(-(f + 1) * x)) / (1 - std::exp(-x));
    r.additive = lambda * std::exp(-(f + 1) * x);
    r.hyper = lambda * std::exp(-(f + 2) * x) / (1 - std::exp(-x));
  }
  r.increased_since_cut = std::exp(-x);
  return r;
}

// From the run's history, at step i: a flow's increase timer fires when its last cut was k timer
// periods ago: a cut at t - kT (density lambda(t - kT), from cuts_before) and no CNP since.
// After a CNP the receiver ignores marks for tau_cnp, then answers the first one, so "no CNP
// since" is "no mark from t - kT + tau_cnp on": exp(-marks in between). That keeps the timer's
// memory (the fast recovery follows a burst of cuts one period later) and its regularity (while
// every cell is marked, CNPs come every tau_cnp and the timer never fires), as in the packet
// model. Stages are followed one by one up to the first hyper increase; flows cut longer ago are
// all in hyper increase, their timers firing once a period at phases long since spread out.
IncreaseRates RememberedIncreases(const DcqcnConfig& d, TimeNs i, TimeNs timer_steps,
                                  TimeNs cnp_steps, double dt,
                                  const std::vector<double>& cuts_before,
                                  const std::vector<double>& marks_before) {
  IncreaseRates r;
  const double marks_now = marks_before[size_t(i) + 1];
  const double never_cut = std::exp(-cuts_before[size_t(i) + 1]);
  auto no_cnp_since = [&](TimeNs back) {
    const TimeNs from = std::max<TimeNs>(0, i + 1 - back + cnp_steps);
    return from > i ? 1.0 : std::exp(-(marks_now - marks_before[size_t(from)]));
  };
  const TimeNs fast_steps = TimeNs(d.fast_recovery_steps);
  const TimeNs stages = fast_steps + 2;
  for (TimeNs k = 1; k <= stages && k * timer_steps <= i; ++k) {
    const size_t then = size_t(i - k * timer_steps);
    const double rate =
        (cuts_before[then + 1] - cuts_before[then]) / dt * no_cnp_since(k * timer_steps);
    if (k <= fast_steps) {
      r.fast += rate;
    } else if (k == fast_steps + 1) {
      r.additive += rate;
    } else {
      r.hyper += rate;
    }
  }
  if ((stages + 1) * timer_steps <= i) {
    const double long_ago = no_cnp_since((stages + 1) * timer_steps) - never_cut;
    r.hyper += std::max(0.0, long_ago) / double(d.increase_interval_ns);
  }
  // Cut once, and no CNP within the last period.
  r.increased_since_cut = std::max(0.0, no_cnp_since(timer_steps) - never_cut);
  return r;
}

}  // namespace

std::vector<DcqcnFlowsScenario> DcqcnFlowsScenarios() {
  std::vector<DcqcnFlowsScenario> v;
  for (uint32_t n : {2u, 4u, 8u, 16u}) {
    DcqcnFlowsScenario s;
    s.name = "dcqcn-" + std::to_string(n) + "-flows";
    s.flows = n;
    v.push_back(s);
  }
  return v;
}

DcqcnFlowsResult SolveDcqcnFluid(const DcqcnFlowsScenario& s, DcqcnFluidTimer timer_model,
                                 TimeNs step_ns) {
  const FabricConfig fabric;
  const DcqcnConfig& d = s.dcqcn;
  // Rates in wire bytes per nanosecond; the packet model paces wire bytes too.
  const double capacity = s.gbps / 8;
  const double cell = fabric.mtu_bytes + fabric.header_bytes;
  const double per_mbps = 1.0 / 8000;  // Mb/s -> bytes/ns
  const double line_scale = s.gbps / 25;
  const double rate_ai = d.rate_ai_mbps * line_scale * per_mbps;
  const double rate_hai = d.rate_hai_mbps * line_scale * per_mbps;
  const double min_rate = d.min_rate_mbps * per_mbps;
  const double kmin = double(s.ecn_kmin_bytes), kmax = double(s.ecn_kmax_bytes);
  const double tau_cnp = double(d.cnp_interval_ns), tau_alpha = double(d.alpha_interval_ns);
  // From a cell's dequeue at the bottleneck to the sender's new rate reaching that queue: the
  // cell's serialisation and link to the receiver, the CNP's three hops back (control cells go
  // first at every port), half a decrease interval on average before the cut, then the sender's
  // next cell and its link.
  const double ser_cell = cell / capacity, ser_control = fabric.control_bytes / capacity;
  const double delay = 4 * double(s.link_delay_ns) + 2 * ser_cell + 2 * ser_control +
                       double(d.decrease_interval_ns) / 2;
  const size_t lag = std::max<size_t>(1, size_t(delay / double(step_ns) + 0.5));

  // The queue and RC one feedback delay ago, as a ring of the last `lag` steps.
  std::vector<double> queue_history(lag, 0.0), rate_history(lag, capacity);
  double rc = capacity, rt = capacity, alpha = 1, q = 0;
  bool seen_cnp = false;  // the timers run only after a flow's first CNP
  QueueStats stats;
  DcqcnFlowsResult r;
  double cnps = 0;
  const TimeNs steps = s.duration_ns / step_ns;
  const double dt = double(step_ns);
  const TimeNs timer_steps = std::max<TimeNs>(1, d.increase_interval_ns / step_ns);
  // Expected cuts per flow before each step: cuts_before[i] covers steps 0 .. i - 1.
  std::vector<double> cuts_before(size_t(steps) + 1, 0.0);
  // Expected marked cells per flow before each step.
  std::vector<double> marks_before(size_t(steps) + 1, 0.0);
  const TimeNs cnp_steps = d.cnp_interval_ns / step_ns;
  for (TimeNs i = 0; i < steps; ++i) {
    const TimeNs now = i * step_ns;
    const size_t slot = size_t(i) % lag;
    const double q_seen = queue_history[slot], rc_seen = rate_history[slot];
    queue_history[slot] = q;
    rate_history[slot] = rc;

    double p = 0;
    if (q_seen >= kmax) {
      p = 1;
    } else if (q_seen > kmin) {
      p = s.ecn_pmax * (q_seen - kmin) / (kmax - kmin);
    }
    const double cells_per_ns = rc_seen / cell;
    const double lambda = p * cells_per_ns / (1 + p * cells_per_ns * tau_cnp);
    seen_cnp = seen_cnp || lambda > 0;
    cuts_before[size_t(i) + 1] = cuts_before[size_t(i)] + lambda * dt;
    marks_before[size_t(i) + 1] = marks_before[size_t(i)] + p * cells_per_ns * dt;

    const IncreaseRates inc =
        timer_model == DcqcnFluidTimer::kStationary
            ? (seen_cnp ? StationaryIncreases(d, lambda) : IncreaseRates{})
            : RememberedIncreases(d, i, timer_steps, cnp_steps, dt, cuts_before, marks_before);
    const double increases = inc.fast + inc.additive + inc.hyper;
    const double target_gain = inc.additive * rate_ai + inc.hyper * rate_hai;
    const double cut_after_increase = lambda * inc.increased_since_cut;
    const double drc = -lambda * rc * alpha / 2 + increases * (rt - rc) / 2 + target_gain / 2;
    const double drt = target_gain - cut_after_increase * (rt - rc);
    const double dalpha = seen_cnp ? d.g * lambda - d.g * alpha / tau_alpha : 0;
    const double dq = double(s.flows) * rc - capacity;

    rc = std::clamp(rc + drc * dt, min_rate, capacity);
    rt = std::clamp(rt + drt * dt, rc, capacity);
    alpha = std::clamp(alpha + dalpha * dt, 0.0, 1.0);
    q = std::max(0.0, q + dq * dt);
    if (now % s.trace_ns == 0) {
      r.queue_trace_bytes.push_back(q);
      r.rate_trace_gbps.push_back(rc * 8);
    }
    if (now >= s.warmup_ns) {
      stats.Add(q);
      cnps += lambda * dt;
    }
  }
  stats.Into(&r);
  r.cnps_per_flow_ms = cnps / (double(s.duration_ns - s.warmup_ns) / double(kMillisecond));
  return r;
}

DcqcnFlowsResult SimulateDcqcnFlows(const DcqcnFlowsScenario& s, uint64_t seed) {
  SimConfig config;
  config.transport = TransportKind::kRdma;
  const uint32_t hosts = s.flows + 1;
  FabricConfig& fabric = config.fabric;
  fabric.hosts_per_leaf = hosts;  // one switch
  fabric.spines = 1;
  fabric.host_gbps = s.gbps;
  fabric.link_delay_ns = s.link_delay_ns;
  SetRedAtRate(fabric, s.gbps, s.ecn_kmin_bytes, s.ecn_kmax_bytes, s.ecn_pmax);
  fabric.buffer_bytes = s.buffer_bytes;
  config.dcqcn = s.dcqcn;
  config.dcqcn.enabled = true;
  config.engine.window_bytes = 0;
  config.workload.servers = 1;
  config.workload.trainers = s.flows;

  EventQueue events;
  Stats stats;
  MessageTable messages;
  Network network(fabric, hosts, &events, seed * 2 + 1, &stats);
  RdmaStack rdma(config, &network, &events, &messages, &stats);
  NullSink sink;
  rdma.SetSink(&sink);
  network.SetHostStack(&rdma);
  // One message per flow that the run cannot finish: 1 GiB is 344 ms at 25 Gb/s.
  for (uint32_t i = 0; i < s.flows; ++i) rdma.Send(i + 1, 0, MessageKind::kPush, 1u << 30, 0);

  DcqcnFlowsResult r;
  QueueStats queue;
  uint64_t cnps_at_warmup = 0;
  bool warm = false;
  TimeNs next_sample = 0;
  while (!events.empty() && events.NextTime() < s.duration_ns) {
    while (next_sample <= events.NextTime()) {
      if (next_sample >= s.warmup_ns) {
        if (!warm) cnps_at_warmup = stats.cnps;
        warm = true;
        queue.Add(double(network.EgressQueueBytes(0)));
      }
      if (next_sample % s.trace_ns == 0) {
        r.queue_trace_bytes.push_back(double(network.EgressQueueBytes(0)));
        r.rate_trace_gbps.push_back(rdma.CurrentRateMbps(1, 0, next_sample) / 1000);
      }
      next_sample += kMicrosecond;
    }
    DispatchEvent(events.Pop(), network, nullptr, [](const Event&) {});
  }
  network.Finish(events.now());
  queue.Into(&r);
  double measured_ms = double(s.duration_ns - s.warmup_ns) / double(kMillisecond);
  r.cnps_per_flow_ms = double(stats.cnps - cnps_at_warmup) / double(s.flows) / measured_ms;
  for (uint64_t x : stats.pfc_xoff) r.pfc_pauses += x;
  return r;
}

}  // namespace bx::sim
