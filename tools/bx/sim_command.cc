// `bx sim incast`: the fabric simulation (src/sim/, docs/SIMULATION.md). One run, a
// comparison (window off / window on / TCP-DCTCP), or a sweep over the window or the switch
// buffer that writes a CSV and an SVG plot through gnuplot.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "sim/simulation.h"
#include "svg_plot.h"

namespace bx::tools {
namespace {

using sim::SimConfig;
using sim::SimResult;

// The window the engine should default to, from the sweep in docs/SIMULATION.md.
constexpr uint64_t kDefaultWindowBytes = 4096;

struct SimOptions {
  uint32_t servers = 124;
  uint32_t trainers = 346;
  uint32_t scale = 1;  // multiplies every kind of host (cost per simulated second vs size)
  std::string window = "default";
  std::string buffer = "32M";
  double duration_s = 0.2;
  uint64_t seed = 1;
  uint32_t threads = DefaultSimThreads();
  bool json = false;
  std::string transport = "rdma";
  double compute_us = 1000;
  std::string sweep;
  bool compare = false;
  std::string out_dir = "sim-out";
  bool packed = false;
  bool no_dcqcn = false;
  bool tcp_acks_with_data = false;
  bool tcp_cwnd_limited = false;
  bool whole_fragments = false;
  double tcp_host_cost_us = 5;
  uint32_t victims = 0;  // victim clients
  uint32_t victim_servers = 0;
  double victim_interval_us = 100;
  bool victim_fetch_hot = false;
  bool no_incast = false;
};

// "4096", "4K", "16M" (binary multiples).
uint64_t ParseBytes(const std::string& text) {
  size_t used = 0;
  double value = std::stod(text, &used);
  std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB")
    scale = 1024;
  else if (suffix == "M" || suffix == "MiB")
    scale = 1024.0 * 1024;
  else if (!suffix.empty())
    throw CLI::ValidationError("bytes", "bad size: " + text);
  return uint64_t(value * scale);
}

// nullopt = window off.
std::optional<uint64_t> ParseWindow(const std::string& text) {
  if (text == "off" || text == "0") return std::nullopt;
  if (text == "default") return kDefaultWindowBytes;
  return ParseBytes(text);
}

SimConfig BaseConfig(const SimOptions& o) {
  SimConfig c;
  c.workload.servers = o.servers * o.scale;
  c.workload.trainers = o.trainers * o.scale;
  c.workload.compute_ns = sim::TimeNs(o.compute_us * 1000);
  c.fabric.buffer_bytes = ParseBytes(o.buffer);
  c.fabric.interleave_hosts = !o.packed;
  c.dcqcn.enabled = !o.no_dcqcn;
  c.fabric.tcp_acks_with_data = o.tcp_acks_with_data;
  c.tcp.grow_only_when_cwnd_limited = o.tcp_cwnd_limited;
  c.engine.fragment_fits_window = !o.whole_fragments;
  c.tcp.host_cost_ns = sim::TimeNs(o.tcp_host_cost_us * 1000);
  c.duration_ns = sim::TimeNs(o.duration_s * 1e9);
  c.seed = o.seed;
  c.threads = o.threads;
  c.workload.incast = !o.no_incast;
  c.workload.victim_clients = o.victims * o.scale;
  c.workload.victim_servers = o.victim_servers * o.scale;
  c.workload.victim_interval_ns = sim::TimeNs(o.victim_interval_us * 1000);
  c.workload.victim_fetch_hot = o.victim_fetch_hot;
  std::optional<uint64_t> window = ParseWindow(o.window);
  c.engine.window_bytes = window.value_or(0);
  c.transport = o.transport == "tcp" ? sim::TransportKind::kTcp : sim::TransportKind::kRdma;
  return c;
}

nlohmann::ordered_json ToJson(const SimResult& r) {
  const SimConfig& c = r.config;
  const sim::Stats& s = r.stats;
  bool rdma = c.transport == sim::TransportKind::kRdma;
  nlohmann::ordered_json j;
  j["transport"] = rdma ? "rdma" : "tcp-dctcp";
  if (rdma && c.engine.window_bytes != 0) {
    j["window_bytes"] = c.engine.window_bytes;
  } else {
    j["window_bytes"] = nullptr;
  }
  j["push_p50_us"] = r.push_p50_us;
  j["push_p99_us"] = r.push_p99_us;
  j["pfc_xoff"] = r.pfc_xoff;
  j["paused_fraction"] = r.paused_fraction;
  j["peak_buffer_bytes"] = s.peak_buffer_bytes;
  j["sim_seconds"] = r.sim_seconds;
  j["wall_seconds"] = r.wall_seconds;
  j["threads"] = r.partitions;
  j["fetch_p50_us"] = r.fetch_p50_us;
  j["fetch_p99_us"] = r.fetch_p99_us;
  nlohmann::ordered_json xoff, paused;
  for (size_t t = 0; t < size_t(sim::PauseTier::kCount); ++t) {
    xoff[sim::TierName(sim::PauseTier(t))] = s.pfc_xoff[t];
    paused[sim::TierName(sim::PauseTier(t))] = r.paused_fraction_by_tier[t];
  }
  j["pfc_xoff_by_tier"] = xoff;
  j["paused_fraction_by_tier"] = paused;
  if (c.workload.victim_clients > 0) {
    j["victim_push_p50_us"] = r.victim_push_p50_us;
    j["victim_push_p99_us"] = r.victim_push_p99_us;
    j["victim_fetch_p50_us"] = r.victim_fetch_p50_us;
    j["victim_fetch_p99_us"] = r.victim_fetch_p99_us;
    j["victim_pushes"] = s.victim_push_latency_ns.size();
    j["victim_fetches"] = s.victim_fetch_latency_ns.size();
    j["victim_incomplete"] = s.victim_incomplete;
    j["victim_clients"] = c.workload.victim_clients;
    j["victim_servers"] = c.workload.victim_servers;
    j["victim_interval_us"] = double(c.workload.victim_interval_ns) / 1000;
    j["victim_fetch_from"] = c.workload.victim_fetches_hot() ? "hot" : "cold";
  }
  j["dcqcn_rate_cuts"] = s.dcqcn_rate_cuts;
  j["ecn_marks"] = s.ecn_marks;
  j["cnps"] = s.cnps;
  j["drops"] = s.drops;
  j["tcp_timeouts"] = s.tcp_timeouts;
  j["tcp_fast_retransmits"] = s.tcp_fast_retransmits;
  j["window_stalls"] = s.window_stalls;
  j["credit_stalls"] = s.credit_stalls;
  j["max_outstanding_bytes"] = s.max_outstanding_bytes;
  j["headroom_overflow_bytes"] = s.headroom_overflow_bytes;
  j["fragment_bytes"] = rdma ? r.fragment_bytes : 0;
  j["buffer_bytes"] = c.fabric.buffer_bytes;
  j["pushes"] = s.push_latency_ns.size();
  j["push_incomplete"] = s.push_incomplete;
  j["iterations"] = s.iterations;
  j["events"] = r.events;
  j["events_per_sec"] = r.wall_seconds > 0 ? double(r.events) / r.wall_seconds : 0;
  // The simulator's own cost, to compare sizes: wall seconds per simulated second.
  j["wall_seconds_per_sim_second"] = r.sim_seconds > 0 ? r.wall_seconds / r.sim_seconds : 0;
  j["events_per_sim_second"] = r.sim_seconds > 0 ? double(r.events) / r.sim_seconds : 0;
  j["hosts"] = c.workload.hosts();
  j["incast"] = c.workload.incast;
  j["servers"] = c.workload.servers;
  j["trainers"] = c.workload.trainers;
  j["compute_us"] = double(c.workload.compute_ns) / 1000;
  j["dcqcn"] = c.dcqcn.enabled;
  j["hosts_interleaved"] = c.fabric.interleave_hosts;
  if (!rdma) j["tcp_host_cost_us_per_message_per_side"] = double(c.tcp.host_cost_ns) / 1000;
  j["seed"] = c.seed;
  return j;
}

std::string WindowLabel(const SimResult& r) {
  if (r.config.transport == sim::TransportKind::kTcp) return "tcp";
  return r.config.engine.window_bytes == 0 ? "off" : std::to_string(r.config.engine.window_bytes);
}

void PrintHeader(bool victims) {
  fmt::print("{:<10} {:>9} {:>10} {:>10} {:>10} {:>9} {:>10} {:>12} {:>9} {:>8} {:>7}", "transport",
             "window", "buffer", "push_p50", "push_p99", "pfc_xoff", "paused", "peak_buffer",
             "cuts", "events/s", "wall_s");
  if (victims) fmt::print(" {:>11} {:>11}", "vpush_p99", "vfetch_p99");
  fmt::print("\n");
}

void PrintRow(const SimResult& r) {
  bool rdma = r.config.transport == sim::TransportKind::kRdma;
  fmt::print(
      "{:<10} {:>9} {:>10} {:>10.1f} {:>10.1f} {:>9} {:>10.6f} {:>12} {:>9} {:>8.2e} {:>7.1f}",
      rdma ? "rdma" : "tcp-dctcp", WindowLabel(r), r.config.fabric.buffer_bytes, r.push_p50_us,
      r.push_p99_us, r.pfc_xoff, r.paused_fraction, r.stats.peak_buffer_bytes,
      r.stats.dcqcn_rate_cuts, r.wall_seconds > 0 ? double(r.events) / r.wall_seconds : 0.0,
      r.wall_seconds);
  if (r.config.workload.victim_clients > 0) {
    fmt::print(" {:>11.1f} {:>11.1f}", r.victim_push_p99_us, r.victim_fetch_p99_us);
  }
  fmt::print("\n");
  std::fflush(stdout);
}

SimResult RunOne(const SimConfig& config, bool json) {
  SimResult r = sim::RunSimulation(config);
  if (!json) PrintRow(r);
  return r;
}

void WriteCsv(const std::string& path, const std::vector<SimResult>& results) {
  std::ofstream out(path);
  out << "transport,window_bytes,buffer_bytes,fragment_bytes,push_p50_us,push_p99_us,pfc_xoff,"
         "paused_fraction,peak_buffer_bytes,dcqcn_rate_cuts,victim_push_p99_us,"
         "victim_fetch_p99_us,sim_seconds,wall_seconds\n";
  for (const SimResult& r : results) {
    bool rdma = r.config.transport == sim::TransportKind::kRdma;
    out << (rdma ? "rdma" : "tcp-dctcp") << ',' << (rdma ? r.config.engine.window_bytes : 0) << ','
        << r.config.fabric.buffer_bytes << ',' << r.fragment_bytes << ',' << r.push_p50_us << ','
        << r.push_p99_us << ',' << r.pfc_xoff << ',' << r.paused_fraction << ','
        << r.stats.peak_buffer_bytes << ',' << r.stats.dcqcn_rate_cuts << ','
        << r.victim_push_p99_us << ',' << r.victim_fetch_p99_us << ',' << r.sim_seconds << ','
        << r.wall_seconds << '\n';
  }
}

// Plots column `x` against P99 push latency and the paused fraction (two y axes).
void Plot(const std::string& dir, const std::string& name, const std::string& x_column,
          const std::string& x_label, bool log_x) {
  SvgPlot plot{
      dir + "/" + name, x_label, "PFC paused fraction",
      std::string("set key autotitle columnhead top left\n") + (log_x ? "set logscale x 2\n" : ""),
      "using " + x_column + ":6 with linespoints title 'push P99 (us)', '' using " + x_column +
          ":8 axes x1y2 with linespoints title 'paused fraction'"};
  RenderSvgPlot(plot, "bx sim");
}

int RunIncast(const SimOptions& o) {
  std::vector<SimResult> results;
  if (!o.json) {
    fmt::print(
        "bx sim incast: {} servers x {} trainers, {:.3f} s simulated, compute {} us, seed {}\n",
        o.servers * o.scale, o.trainers * o.scale, o.duration_s, o.compute_us, o.seed);
    if (o.victims > 0) {
      const sim::WorkloadConfig w = BaseConfig(o).workload;
      fmt::print("victims: {} clients, {} cold servers, one push and one fetch ({}) per {} us{}\n",
                 w.victim_clients, w.victim_servers, w.victim_fetches_hot() ? "hot" : "cold",
                 o.victim_interval_us, o.no_incast ? ", incast off" : "");
    }
    PrintHeader(o.victims > 0);
  }
  if (o.sweep.empty() && !o.compare) {
    results.push_back(RunOne(BaseConfig(o), o.json));
  } else if (o.compare) {
    SimOptions off = o, on = o, tcp = o;
    off.window = "off";
    if (o.window == "off") on.window = "default";
    tcp.transport = "tcp";
    results.push_back(RunOne(BaseConfig(off), o.json));
    results.push_back(RunOne(BaseConfig(on), o.json));
    results.push_back(RunOne(BaseConfig(tcp), o.json));
  } else {
    std::filesystem::create_directories(o.out_dir);
    std::vector<std::string> values;
    if (o.sweep == "window") {
      values = {"off", "64K", "32K", "16K", "8K", "4K", "2K", "1K"};
    } else {
      values = {"12M", "16M", "24M", "32M"};
    }
    for (const std::string& v : values) {
      SimOptions run = o;
      (o.sweep == "window" ? run.window : run.buffer) = v;
      results.push_back(RunOne(BaseConfig(run), o.json));
    }
    std::string name = "sweep_" + o.sweep;
    std::vector<SimResult> plotted;
    for (const SimResult& r : results) {
      // Log axes cannot show "off" (0): the CSV keeps it, the plot shows the windowed runs.
      if (o.sweep != "window" || r.config.engine.window_bytes != 0) plotted.push_back(r);
    }
    WriteCsv(o.out_dir + "/" + name + ".csv", o.sweep == "window" ? results : plotted);
    WriteCsv(o.out_dir + "/" + name + "_plot.csv", plotted);
    Plot(o.out_dir, name + "_plot", o.sweep == "window" ? "2" : "3",
         o.sweep == "window" ? "send window W (bytes)" : "switch buffer (bytes)", true);
    if (!o.json)
      fmt::print("wrote {}/{}.csv and {}/{}_plot.svg\n", o.out_dir, name, o.out_dir, name);
  }
  if (o.json) {
    nlohmann::ordered_json out;
    if (results.size() == 1) {
      out = ToJson(results[0]);
    } else {
      out = nlohmann::ordered_json::array();
      for (const SimResult& r : results) out.push_back(ToJson(r));
    }
    fmt::print("{}\n", out.dump(2));
  }
  return 0;
}

}  // namespace

uint32_t DefaultSimThreads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

void AddTcpAcksOption(CLI::App* command, bool* with_data) {
  command
      ->add_option_function<std::string>(
          "--tcp-acks",
          [with_data](const std::string& where) { *with_data = where == "with-data"; },
          "where switches queue TCP's ACKs: first (the strict-priority control queue) or "
          "with-data (one FIFO, as in ns-3)")
      ->check(CLI::IsMember({"first", "with-data"}))
      ->default_str(*with_data ? "with-data" : "first");
}

void AddSimThreadsOption(CLI::App* command, uint32_t* threads) {
  command
      ->add_option(
          "--threads", *threads,
          "partitions run in parallel (RDMA; at most one per leaf); no result depends on it")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u));
}

void AddSimCommand(CLI::App* app) {
  CLI::App* simulate = app->add_subcommand("sim", "Discrete-event fabric simulations");
  simulate->require_subcommand(1);
  auto options = std::make_shared<SimOptions>();
  CLI::App* incast = simulate->add_subcommand(
      "incast", "Training incast over a leaf-spine RoCE fabric: PFC, ECN/DCQCN, send window");
  incast->add_option("--servers", options->servers, "parameter servers")->capture_default_str();
  incast->add_option("--trainers", options->trainers, "trainers")->capture_default_str();
  incast
      ->add_option("--scale", options->scale,
                   "multiply every kind of host: servers, trainers, victims (4: 496 x 1384)")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  incast
      ->add_option("--window", options->window,
                   "send window per engine: BYTES (4K, 16K...), off, or default (" +
                       std::to_string(kDefaultWindowBytes) + ")")
      ->capture_default_str();
  incast->add_option("--buffer", options->buffer, "shared buffer per switch")
      ->capture_default_str();
  incast->add_option("--duration", options->duration_s, "simulated seconds")->capture_default_str();
  incast->add_option("--seed", options->seed, "random seed")->capture_default_str();
  AddSimThreadsOption(incast, &options->threads);
  incast->add_option("--transport", options->transport, "rdma or tcp (DCTCP, lossy class)")
      ->check(CLI::IsMember({"rdma", "tcp"}))
      ->capture_default_str();
  incast->add_option("--compute-us", options->compute_us, "trainer compute time per iteration")
      ->capture_default_str();
  incast->add_option("--sweep", options->sweep, "window or buffer: run a range, write CSV + SVG")
      ->check(CLI::IsMember({"window", "buffer"}));
  incast->add_flag("--compare", options->compare, "run window off, window on and TCP-DCTCP");
  incast->add_option("--out", options->out_dir, "directory for sweep CSV and plot")
      ->capture_default_str();
  incast->add_flag("--packed", options->packed, "servers packed into racks (default: mixed)");
  incast->add_flag("--no-dcqcn", options->no_dcqcn, "disable DCQCN at the sender NICs");
  incast->add_flag("--whole-fragments", options->whole_fragments,
                   "keep 64 KiB fragments even when the window is smaller");
  AddTcpAcksOption(incast, &options->tcp_acks_with_data);
  incast->add_flag("--tcp-cwnd-limited", options->tcp_cwnd_limited,
                   "TCP grows cwnd only while cwnd limits the sender, as Linux does");
  incast
      ->add_option("--tcp-host-cost-us", options->tcp_host_cost_us,
                   "TCP stack cost per message on each side")
      ->capture_default_str();
  incast
      ->add_option("--victims", options->victims,
                   "victim clients: each pushes to a cold server and fetches once per interval")
      ->capture_default_str();
  incast
      ->add_option("--victim-servers", options->victim_servers,
                   "cold servers (receive only victim traffic)")
      ->capture_default_str();
  incast
      ->add_option("--victim-interval-us", options->victim_interval_us,
                   "mean gap between a victim client's requests (+-50% jitter)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  incast->add_flag("--victim-fetch-hot", options->victim_fetch_hot,
                   "victims fetch from the hot parameter servers (default: cold servers)");
  incast->add_flag("--no-incast", options->no_incast,
                   "trainers stay idle (a baseline for the victims)");
  incast->add_flag("--json", options->json, "JSON output");
  incast->callback([options] {
    int rc = RunIncast(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
  AddSimValidateCommand(simulate);
  AddSimSensitivityCommand(simulate);
  AddSimDcqcnFluidCommand(simulate);
}

}  // namespace bx::tools
