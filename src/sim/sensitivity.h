// How the paper's comparison depends on the model's assumptions. The paper
// reports P99 push latency 74% lower over RDMA than over TCP; this model's verdict rests on
// parameters chosen here (TCP's minimum RTO and host cost, the window, the buffer, DCQCN). Each
// sensitivity point moves one of them from a base configuration and runs RDMA and TCP in the same
// fabric, so the ratio of their P99s can be read against each parameter alone.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/config.h"
#include "sim/simulation.h"

namespace bx::sim {

// The paper's figure: P99 push latency over RDMA is 74% below TCP's (ratio 0.26).
constexpr double kPaperPushP99Ratio = 0.26;

struct SensitivityPoint {
  std::string parameter;  // the axis: "window", "buffer_mb", "dcqcn", "tcp_min_rto_ms", ...
  std::string value;      // as printed: "off", "4096", "200", ...
  bool base = false;      // the base configuration's value on this axis
  SimConfig rdma, tcp;
};

// The points, axis by axis, each axis in increasing order of what it varies. `base` holds the
// RDMA settings (window, buffer, DCQCN) and the TCP ones (min RTO, host cost); its transport is
// ignored. `tcp_host_costs_us` is the host-cost axis (the cost measured on this machine among
// them). "tcp_min_rto_ms_12mb" repeats the RTO axis on the smallest buffer (both transports get
// it; none of its points is the base). The last axis, "tcp_worst", puts every TCP-hostile setting
// together: the longest RTO, the highest host cost and the smallest buffer (both transports get
// that buffer).
std::vector<SensitivityPoint> PlanSensitivity(const SimConfig& base,
                                              const std::vector<double>& tcp_host_costs_us);

struct SensitivityRow {
  SensitivityPoint point;
  // Shared between the rows that ran the same configuration; their latency samples are dropped
  // (the percentiles are kept) so that a whole plan's runs fit in memory at paper scale.
  std::shared_ptr<const SimResult> rdma, tcp;
  // RDMA's P99 over TCP's, censored (stuck pushes count with their age; SimResult).
  double push_p99_ratio = 0;
};

// Runs every distinct configuration of the plan once (the points of different axes share the
// base runs) and calls `on_run` after each simulation, for progress output.
std::vector<SensitivityRow> RunSensitivity(
    const std::vector<SensitivityPoint>& plan,
    const std::function<void(const SimResult&)>& on_run = nullptr);

// One sentence: which points reach the paper's ratio, or that none does and which came closest.
std::string SensitivityVerdict(const std::vector<SensitivityRow>& rows);

}  // namespace bx::sim
