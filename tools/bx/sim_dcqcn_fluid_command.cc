// `bx sim dcqcn-fluid`: N long flows into one port under DCQCN, in the packet
// simulator and in DCQCN's fluid model (src/sim/dcqcn_fluid.h), side by side: the bottleneck
// queue's mean and swing, how often it is empty, and the CNPs each flow receives. With --check B
// it fails when a queue mean or CNP rate ratio is off by more than B (the ctest bound).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "sim/dcqcn_fluid.h"

namespace bx::tools {
namespace {

struct FluidOptions {
  std::vector<uint32_t> flows;  // default: the scenarios' 2, 4, 8, 16
  double duration_ms = 25;
  double warmup_ms = 5;
  double packet_cnp_interval_us = -1;  // control: a different CNP interval in the packet model
  double check = 0;                    // 0 = report only
  bool json = false;
  uint64_t seed = 1;
  std::string trace_csv;  // the queue and one flow's rate over time, both models
};

// time_us, then per scenario its packet and fluid queue (bytes) and rate (Gb/s).
void WriteTraces(const std::string& path, const std::vector<sim::DcqcnFlowsScenario>& scenarios,
                 const std::vector<std::pair<sim::DcqcnFlowsResult, sim::DcqcnFlowsResult>>& runs) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw CLI::RuntimeError("cannot write " + path, 2);
  fmt::print(f, "time_us");
  for (const sim::DcqcnFlowsScenario& s : scenarios) {
    fmt::print(f, ",{0}_queue_packet,{0}_queue_fluid,{0}_rate_packet,{0}_rate_fluid", s.name);
  }
  fmt::print(f, "\n");
  size_t rows = SIZE_MAX;
  for (const auto& [packet, fluid] : runs) {
    rows = std::min({rows, packet.queue_trace_bytes.size(), fluid.queue_trace_bytes.size()});
  }
  for (size_t i = 0; i < rows; ++i) {
    fmt::print(f, "{}", double(i * scenarios[0].trace_ns) / 1000);
    for (const auto& [packet, fluid] : runs) {
      fmt::print(f, ",{:.0f},{:.0f},{:.3f},{:.3f}", packet.queue_trace_bytes[i],
                 fluid.queue_trace_bytes[i], packet.rate_trace_gbps[i], fluid.rate_trace_gbps[i]);
    }
    fmt::print(f, "\n");
  }
  std::fclose(f);
}

double FluidRatio(double packet, double fluid) {
  return fluid > 0 ? packet / fluid : (packet > 0 ? INFINITY : 1);
}

int RunFluid(const FluidOptions& o) {
  std::vector<sim::DcqcnFlowsScenario> scenarios = sim::DcqcnFlowsScenarios();
  if (!o.flows.empty()) {
    scenarios.clear();
    for (uint32_t n : o.flows) {
      sim::DcqcnFlowsScenario s;
      s.name = "dcqcn-" + std::to_string(n) + "-flows";
      s.flows = n;
      scenarios.push_back(s);
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::pair<sim::DcqcnFlowsResult, sim::DcqcnFlowsResult>> runs;
  bool agree = true;
  if (!o.json) {
    fmt::print(
        "packet model (pk), fluid model as the paper's (fl), fluid remembering its timers (fr)\n");
    fmt::print("{:<16} {:>9} {:>9} {:>6} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>6} {:>8} {:>5}\n",
               "scenario", "q_mean_pk", "q_mean_fl", "ratio", "q_mean_fr", "q_sd_pk", "q_sd_fl",
               "empty", "cnp/ms_pk", "cnp/ms_fl", "ratio", "cnp/ms_fr", "pfc");
  }
  for (sim::DcqcnFlowsScenario s : scenarios) {
    s.duration_ns = sim::TimeNs(o.duration_ms * 1e6);
    s.warmup_ns = sim::TimeNs(o.warmup_ms * 1e6);
    sim::DcqcnFlowsResult fluid = sim::SolveDcqcnFluid(s, sim::DcqcnFluidTimer::kStationary);
    sim::DcqcnFlowsResult remembered = sim::SolveDcqcnFluid(s, sim::DcqcnFluidTimer::kRemembered);

    sim::DcqcnFlowsScenario packet_side = s;
    if (o.packet_cnp_interval_us > 0) {
      packet_side.dcqcn.cnp_interval_ns = sim::TimeNs(o.packet_cnp_interval_us * 1000);
    }
    auto start = std::chrono::steady_clock::now();
    sim::DcqcnFlowsResult packet = sim::SimulateDcqcnFlows(packet_side, o.seed);
    double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double queue_ratio = FluidRatio(packet.queue_mean_bytes, fluid.queue_mean_bytes);
    double sd_ratio = FluidRatio(packet.queue_sd_bytes, fluid.queue_sd_bytes);
    double cnp_ratio = FluidRatio(packet.cnps_per_flow_ms, fluid.cnps_per_flow_ms);
    if (o.check > 0 &&
        (std::fabs(queue_ratio - 1) > o.check || std::fabs(cnp_ratio - 1) > o.check)) {
      agree = false;
    }
    runs.emplace_back(packet, fluid);  // the trace: packet and the paper-style fluid
    auto side = [](const sim::DcqcnFlowsResult& r) {
      return nlohmann::json{{"queue_mean_bytes", r.queue_mean_bytes},
                            {"queue_sd_bytes", r.queue_sd_bytes},
                            {"queue_empty", r.queue_empty},
                            {"cnps_per_flow_ms", r.cnps_per_flow_ms},
                            {"pfc_pauses", r.pfc_pauses}};
    };
    rows.push_back({{"scenario", s.name},
                    {"flows", s.flows},
                    {"packet", side(packet)},
                    {"fluid", side(fluid)},
                    {"fluid_remembered", side(remembered)},
                    {"queue_mean_ratio", queue_ratio},
                    {"queue_sd_ratio", sd_ratio},
                    {"cnp_ratio", cnp_ratio},
                    {"packet_wall_s", wall_s}});
    if (!o.json) {
      fmt::print(
          "{:<16} {:>9.0f} {:>9.0f} {:>6.3f} {:>9.0f} {:>9.0f} {:>9.0f} {:>6.3f} {:>8.2f} {:>8.2f} "
          "{:>6.3f} {:>8.2f} {:>5}\n",
          s.name, packet.queue_mean_bytes, fluid.queue_mean_bytes, queue_ratio,
          remembered.queue_mean_bytes, packet.queue_sd_bytes, fluid.queue_sd_bytes,
          packet.queue_empty, packet.cnps_per_flow_ms, fluid.cnps_per_flow_ms, cnp_ratio,
          remembered.cnps_per_flow_ms, packet.pfc_pauses);
    }
  }
  if (!o.trace_csv.empty()) WriteTraces(o.trace_csv, scenarios, runs);
  if (o.json) {
    fmt::print("{}\n",
               nlohmann::json{{"scenarios", rows}, {"check", o.check}, {"agree", agree}}.dump(1));
  } else if (o.check > 0) {
    fmt::print("{}: queue mean and CNP rate within {:.0f}%\n", agree ? "agree" : "DISAGREE",
               o.check * 100);
  }
  return agree ? 0 : 1;
}

}  // namespace

void AddSimDcqcnFluidCommand(CLI::App* simulate) {
  auto options = std::make_shared<FluidOptions>();
  CLI::App* fluid = simulate->add_subcommand(
      "dcqcn-fluid", "DCQCN in the packet model against its fluid model, N flows into one port");
  fluid->add_option("--flows", options->flows,
                    "flows into the port (repeatable; default 2 4 8 16)");
  fluid->add_option("--duration-ms", options->duration_ms, "simulated milliseconds (default 25)");
  fluid->add_option("--warmup-ms", options->warmup_ms, "not measured (default 5)");
  fluid->add_option("--check", options->check,
                    "fail if a queue mean or CNP rate ratio is off by more than this (0.2 = 20%)");
  fluid->add_option("--packet-cnp-interval-us", options->packet_cnp_interval_us,
                    "control: a different CNP interval in the packet model only (should disagree)");
  fluid->add_option("--trace-csv", options->trace_csv,
                    "write the queue and one flow's rate over time, both models, to this CSV");
  fluid->add_option("--seed", options->seed, "packet model's seed (default 1)");
  fluid->add_flag("--json", options->json, "JSON output");
  fluid->callback([options] {
    int rc = RunFluid(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace bx::tools
