// `bx sim sensitivity`: how the paper's P99 push comparison (RDMA 74% below TCP) depends on the
// simulation's assumptions (src/sim/sensitivity.h). One parameter at a time,
// RDMA and TCP in the same fabric; a table, a CSV and a gnuplot SVG per parameter, and a verdict.
// The TCP host cost per message is measured on this machine with `bx bench msg`'s tcp throughput
// run unless --tcp-host-cost-us gives it.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "sim/sensitivity.h"
#include "svg_plot.h"

namespace bx::tools {
namespace {

using sim::SensitivityRow;
using sim::SimResult;

struct SensitivityOptions {
  uint32_t servers = 124;
  uint32_t trainers = 346;
  double duration_s = 0.05;
  uint64_t seed = 1;
  uint32_t threads = DefaultSimThreads();
  double compute_us = 1000;
  uint64_t window_bytes = 4096;       // the base RDMA window (bx sim incast's default)
  std::vector<double> host_costs_us;  // empty: 0, 5, measured, 4 x measured
  std::string only;                   // run one axis
  std::string out_dir = "sim-out";
  bool json = false;
};

// Per side, from the tcp transport's CPU per message (both ends) at the workload's mean size.
double MeasuredHostCostUs(const sim::WorkloadConfig& workload) {
  Result<double> both_ends =
      MeasureTcpHostCpuNsPerMessage(size_t(workload.mean_message_bytes), 20000);
  if (!both_ends.ok()) {
    fmt::print(stderr, "bx sim sensitivity: measuring the tcp host cost: {}\n",
               both_ends.status().ToString());
    throw CLI::RuntimeError(1);
  }
  return *both_ends / 2 / 1000;
}

nlohmann::ordered_json RunJson(const SimResult& r) {
  nlohmann::ordered_json j;
  j["push_p50_us"] = r.push_p50_us;
  j["push_p99_us"] = r.push_p99_us;
  j["push_p99_censored_us"] = r.push_p99_censored_us;
  j["push_incomplete"] = r.stats.push_incomplete;
  j["fetch_p99_us"] = r.fetch_p99_us;
  j["iterations"] = r.stats.iterations;
  j["pfc_xoff"] = r.pfc_xoff;
  j["paused_fraction"] = r.paused_fraction;
  j["drops"] = r.stats.drops;
  j["tcp_timeouts"] = r.stats.tcp_timeouts;
  j["wall_seconds"] = r.wall_seconds;
  return j;
}

void WriteAxis(const std::string& dir, const std::string& axis,
               const std::vector<const SensitivityRow*>& rows) {
  std::string base = dir + "/sensitivity_" + axis;
  std::ofstream csv(base + ".csv");
  csv << "value,rdma_push_p99_us,tcp_push_p99_us,ratio,rdma_paused_fraction,rdma_pfc_xoff,"
         "tcp_drops,tcp_timeouts,rdma_iterations,tcp_iterations\n";
  for (const SensitivityRow* r : rows) {
    csv << r->point.value << ',' << r->rdma->push_p99_censored_us << ','
        << r->tcp->push_p99_censored_us << ',' << r->push_p99_ratio << ','
        << r->rdma->paused_fraction << ',' << r->rdma->pfc_xoff << ',' << r->tcp->stats.drops << ','
        << r->tcp->stats.tcp_timeouts << ',' << r->rdma->stats.iterations << ','
        << r->tcp->stats.iterations << '\n';
  }
  csv.close();
  // Values are labels ("off", "rto200+..."), so points are placed by row and labelled.
  SvgPlot plot{base, axis, "RDMA PFC paused fraction",
               "set key top left\nset offsets 0.3, 0.3, 0, 0\n",
               "using 0:2:xtic(1) with linespoints title 'RDMA push P99', "
               "'' using 0:3 with linespoints title 'TCP push P99', "
               "'' using 0:5 axes x1y2 with linespoints title 'RDMA paused fraction'"};
  RenderSvgPlot(plot, "bx sim sensitivity");
}

void PrintTable(const std::vector<SensitivityRow>& rows) {
  fmt::print("\n{:<19} {:>22} {:>10} {:>10} {:>7} {:>9} {:>9} {:>7} {:>7} {:>6} {:>6} {:>6}\n",
             "parameter", "value", "rdma_p99", "tcp_p99", "ratio", "rdma_xoff", "paused", "drops",
             "rtos", "stuck", "r_iter", "t_iter");
  for (const SensitivityRow& r : rows) {
    fmt::print(
        "{:<19} {:>22} {:>10.1f} {:>10.1f} {:>7.2f} {:>9} {:>9.5f} {:>7} {:>7} {:>6} {:>6} {:>6}\n",
        r.point.parameter, r.point.value + (r.point.base ? "*" : ""), r.rdma->push_p99_censored_us,
        r.tcp->push_p99_censored_us, r.push_p99_ratio, r.rdma->pfc_xoff, r.rdma->paused_fraction,
        r.tcp->stats.drops, r.tcp->stats.tcp_timeouts, r.tcp->stats.push_incomplete,
        r.rdma->stats.iterations, r.tcp->stats.iterations);
  }
  fmt::print(
      "(* base value; P99s count pushes still waiting at the end with their age; r_iter and "
      "t_iter:\n"
      " trainer iterations completed over RDMA and TCP, which a push P99 does not show: a trainer\n"
      " stuck behind a timeout pushes nothing while it waits)\n");
}

int RunSensitivityCommand(const SensitivityOptions& o) {
  sim::SimConfig base;
  base.workload.servers = o.servers;
  base.workload.trainers = o.trainers;
  base.workload.compute_ns = sim::TimeNs(o.compute_us * 1000);
  base.duration_ns = sim::TimeNs(o.duration_s * 1e9);
  base.seed = o.seed;
  base.threads = o.threads;
  base.engine.window_bytes = o.window_bytes;

  std::vector<double> costs = o.host_costs_us;
  double measured = -1;
  if (costs.empty()) {
    measured = MeasuredHostCostUs(base.workload);
    costs = {0, double(base.tcp.host_cost_ns) / 1000, measured, 4 * measured};
  }
  std::vector<sim::SensitivityPoint> plan = sim::PlanSensitivity(base, costs);
  if (!o.only.empty()) {
    std::erase_if(plan, [&](const sim::SensitivityPoint& p) { return p.parameter != o.only; });
    if (plan.empty()) {
      fmt::print(stderr, "bx sim sensitivity: no parameter named {}\n", o.only);
      return 2;
    }
  }
  if (!o.json) {
    fmt::print("bx sim sensitivity: {} servers x {} trainers, {:.3f} s simulated, seed {}\n",
               o.servers, o.trainers, o.duration_s, o.seed);
    if (measured >= 0) {
      fmt::print("tcp host cost measured here: {:.1f} us per {} B message per side\n", measured,
                 base.workload.mean_message_bytes);
    }
  }
  std::vector<SensitivityRow> rows = sim::RunSensitivity(plan, [&](const SimResult& r) {
    if (o.json) return;
    bool rdma = r.config.transport == sim::TransportKind::kRdma;
    fmt::print(
        "  ran {:<4} window {:>6} buffer {:>3} MB dcqcn {:<3} rto {:>3} ms cost {:>5.1f} us:"
        " P99 {:.1f} us, {:.0f} s\n",
        rdma ? "rdma" : "tcp", rdma ? r.config.engine.window_bytes : 0,
        r.config.fabric.buffer_bytes >> 20, rdma && r.config.dcqcn.enabled ? "on" : "off",
        rdma ? 0 : r.config.tcp.min_rto_ns / sim::kMillisecond,
        rdma ? 0.0 : double(r.config.tcp.host_cost_ns) / 1000, r.push_p99_censored_us,
        r.wall_seconds);
    std::fflush(stdout);
  });

  std::filesystem::create_directories(o.out_dir);
  std::vector<std::string> axes;
  for (const SensitivityRow& r : rows) {
    if (axes.empty() || axes.back() != r.point.parameter) axes.push_back(r.point.parameter);
  }
  for (const std::string& axis : axes) {
    std::vector<const SensitivityRow*> of_axis;
    for (const SensitivityRow& r : rows) {
      if (r.point.parameter == axis) of_axis.push_back(&r);
    }
    WriteAxis(o.out_dir, axis, of_axis);
  }
  std::string verdict = sim::SensitivityVerdict(rows);
  if (o.json) {
    nlohmann::ordered_json out;
    out["servers"] = o.servers;
    out["trainers"] = o.trainers;
    out["sim_seconds"] = o.duration_s;
    out["seed"] = o.seed;
    out["tcp_host_cost_measured_us"] = measured >= 0 ? nlohmann::json(measured) : nullptr;
    out["paper_push_p99_ratio"] = sim::kPaperPushP99Ratio;
    out["points"] = nlohmann::ordered_json::array();
    for (const SensitivityRow& r : rows) {
      nlohmann::ordered_json p;
      p["parameter"] = r.point.parameter;
      p["value"] = r.point.value;
      p["base"] = r.point.base;
      p["push_p99_ratio"] = r.push_p99_ratio;
      p["rdma"] = RunJson(*r.rdma);
      p["tcp"] = RunJson(*r.tcp);
      out["points"].push_back(p);
    }
    out["verdict"] = verdict;
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  PrintTable(rows);
  fmt::print("verdict: {}\nwrote {}/sensitivity_<parameter>.csv and .svg\n", verdict, o.out_dir);
  return 0;
}

}  // namespace

void AddSimSensitivityCommand(CLI::App* simulate) {
  auto options = std::make_shared<SensitivityOptions>();
  CLI::App* command = simulate->add_subcommand(
      "sensitivity",
      "P99 push, RDMA against TCP, as each model parameter moves (TCP RTO and host cost, window, "
      "buffer, DCQCN)");
  command->add_option("--servers", options->servers, "parameter servers")->capture_default_str();
  command->add_option("--trainers", options->trainers, "trainers")->capture_default_str();
  command->add_option("--duration", options->duration_s, "simulated seconds per run")
      ->capture_default_str();
  command->add_option("--seed", options->seed, "random seed")->capture_default_str();
  AddSimThreadsOption(command, &options->threads);
  command->add_option("--compute-us", options->compute_us, "trainer compute per iteration")
      ->capture_default_str();
  command->add_option("--window", options->window_bytes, "the base RDMA send window in bytes")
      ->capture_default_str();
  command->add_option("--tcp-host-cost-us", options->host_costs_us,
                      "TCP host cost axis, us per message per side (default: 0, 5, measured "
                      "here with bx bench msg, 4 x measured)");
  command->add_option("--only", options->only,
                      "one parameter: window, buffer_mb, dcqcn, tcp_min_rto_ms, "
                      "tcp_min_rto_ms_12mb, tcp_host_cost_us or tcp_worst");
  command->add_option("--out", options->out_dir, "directory for the CSVs and SVG plots")
      ->capture_default_str();
  command->add_flag("--json", options->json, "JSON output");
  command->callback([options] {
    int rc = RunSensitivityCommand(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace bx::tools
