#include "sim/sensitivity.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

namespace bx::sim {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// What the plan varies; two configurations with the same key give the same run.
using RunKey = std::tuple<int, uint64_t, uint64_t, bool, TimeNs, TimeNs>;

RunKey KeyOf(const SimConfig& c) {
  bool rdma = c.transport == TransportKind::kRdma;
  return {int(c.transport),        rdma ? c.engine.window_bytes : 0, c.fabric.buffer_bytes,
          rdma && c.dcqcn.enabled, rdma ? 0 : c.tcp.min_rto_ns,      rdma ? 0 : c.tcp.host_cost_ns};
}

// `v` with `digits` decimals; digits < 0: none when v is whole, else one.
std::string Number(double v, int digits = -1) {
  if (digits < 0) digits = v == double(int64_t(v)) ? 0 : 1;
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

SensitivityPoint PointFrom(const SimConfig& base, std::string parameter, std::string value,
                           bool is_base) {
  SensitivityPoint p{std::move(parameter), std::move(value), is_base, base, base};
  p.rdma.transport = TransportKind::kRdma;
  p.tcp.transport = TransportKind::kTcp;
  return p;
}

}  // namespace

std::vector<SensitivityPoint> PlanSensitivity(const SimConfig& base,
                                              const std::vector<double>& tcp_host_costs_us) {
  std::vector<SensitivityPoint> plan;
  for (uint64_t w : {uint64_t{0}, uint64_t{64} << 10, uint64_t{16} << 10, uint64_t{4} << 10}) {
    auto p = PointFrom(base, "window", w == 0 ? "off" : std::to_string(w),
                       w == base.engine.window_bytes);
    p.rdma.engine.window_bytes = w;
    plan.push_back(p);
  }
  for (uint64_t mb : {12, 16, 32}) {
    auto p =
        PointFrom(base, "buffer_mb", std::to_string(mb), mb * kMiB == base.fabric.buffer_bytes);
    p.rdma.fabric.buffer_bytes = p.tcp.fabric.buffer_bytes = mb * kMiB;
    plan.push_back(p);
  }
  for (bool on : {true, false}) {
    auto p = PointFrom(base, "dcqcn", on ? "on" : "off", on == base.dcqcn.enabled);
    p.rdma.dcqcn.enabled = on;
    plan.push_back(p);
  }
  for (int ms : {1, 10, 200}) {
    TimeNs rto = ms * kMillisecond;
    auto p = PointFrom(base, "tcp_min_rto_ms", std::to_string(ms), rto == base.tcp.min_rto_ns);
    p.tcp.tcp.min_rto_ns = rto;
    plan.push_back(p);
  }
  // The same RTOs on a shallow buffer (12 MB for both transports), where TCP drops all along,
  // not only in the first iterations' burst: a tuned RTO meets sustained loss.
  for (int ms : {1, 10, 200}) {
    auto p = PointFrom(base, "tcp_min_rto_ms_12mb", std::to_string(ms), false);
    p.tcp.tcp.min_rto_ns = ms * kMillisecond;
    p.rdma.fabric.buffer_bytes = p.tcp.fabric.buffer_bytes = 12 * kMiB;
    plan.push_back(p);
  }
  std::vector<double> costs = tcp_host_costs_us;
  std::sort(costs.begin(), costs.end());
  costs.erase(std::unique(costs.begin(), costs.end()), costs.end());
  for (double us : costs) {
    TimeNs cost = TimeNs(us * 1000);
    auto p = PointFrom(base, "tcp_host_cost_us", Number(us), cost == base.tcp.host_cost_ns);
    p.tcp.tcp.host_cost_ns = cost;
    plan.push_back(p);
  }
  auto worst = PointFrom(base, "tcp_worst",
                         "rto200+cost" + Number(costs.empty() ? 0 : costs.back()) + "+12MB", false);
  worst.tcp.tcp.min_rto_ns = 200 * kMillisecond;
  if (!costs.empty()) worst.tcp.tcp.host_cost_ns = TimeNs(costs.back() * 1000);
  worst.rdma.fabric.buffer_bytes = worst.tcp.fabric.buffer_bytes = 12 * kMiB;
  plan.push_back(worst);
  return plan;
}

std::vector<SensitivityRow> RunSensitivity(const std::vector<SensitivityPoint>& plan,
                                           const std::function<void(const SimResult&)>& on_run) {
  std::map<RunKey, std::shared_ptr<const SimResult>> runs;
  auto run = [&](const SimConfig& config) {
    std::shared_ptr<const SimResult>& slot = runs[KeyOf(config)];
    if (slot == nullptr) {
      auto result = std::make_shared<SimResult>(RunSimulation(config));
      result->stats.push_latency_ns = {};
      result->stats.push_incomplete_age_ns = {};
      result->stats.fetch_latency_ns = {};
      if (on_run) on_run(*result);
      slot = std::move(result);
    }
    return slot;
  };
  std::vector<SensitivityRow> rows;
  for (const SensitivityPoint& p : plan) {
    SensitivityRow row{p, run(p.rdma), run(p.tcp), 0};
    if (row.tcp->push_p99_censored_us > 0) {
      row.push_p99_ratio = row.rdma->push_p99_censored_us / row.tcp->push_p99_censored_us;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string SensitivityVerdict(const std::vector<SensitivityRow>& rows) {
  std::vector<std::string> reached;
  const SensitivityRow* closest = nullptr;
  for (const SensitivityRow& r : rows) {
    if (r.push_p99_ratio <= kPaperPushP99Ratio) {
      reached.push_back(r.point.parameter + "=" + r.point.value);
    }
    if (closest == nullptr || r.push_p99_ratio < closest->push_p99_ratio) closest = &r;
  }
  if (closest == nullptr) return "no points were run";
  if (!reached.empty()) {
    std::string list;
    for (const std::string& s : reached) list += (list.empty() ? "" : ", ") + s;
    return "the paper's P99 push ratio (" + Number(kPaperPushP99Ratio, 2) +
           ") is reached at: " + list;
  }
  return "no point reaches the paper's P99 push ratio (" + Number(kPaperPushP99Ratio, 2) +
         "); the closest is " + closest->point.parameter + "=" + closest->point.value + " at " +
         Number(closest->push_p99_ratio, 2) + " (RDMA " +
         Number(closest->rdma->push_p99_censored_us) + " us, TCP " +
         Number(closest->tcp->push_p99_censored_us) + " us)";
}

}  // namespace bx::sim
