// `bx sim validate`: runs the incast scenarios of src/sim/validate.h in our simulator
// and in ns-3 (bx_ns3_incast, tools/ns3_validate/) and prints how well they agree: P50 and P99
// flow completion time and bottleneck queue occupancy, ours / ns-3. With --check B it fails when
// a P50 or P99 ratio is off by more than B (the ctest bound).
#include <fmt/core.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "sim/validate.h"

namespace bx::tools {
namespace {

struct ValidateOptions {
  std::vector<std::string> scenarios;
  std::string ns3;
  bool json = false;
  double check = 0;                // 0 = report only
  double ours_delay_us = -1;       // control: a mismatched link delay on our side only
  bool ecn_at_enqueue = false;     // ours marks on arrival, as ns-3's RED does
  bool tcp_acks_with_data = true;  // ours queues TCP's ACKs with data, as ns-3 does
  bool cwnd_limited = false;       // ours grows cwnd only while it limits the sender (Linux)
  bool ns3_even_paths = false;     // control: ns-3's flows dealt evenly over the spines
};

// bx_ns3_incast sits next to bx in the build tree (bin/).
std::string DefaultNs3Path() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "bx_ns3_incast" : (self.parent_path() / "bx_ns3_incast").string();
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// CLI11 prints nothing for a RuntimeError: say why before exiting with 2.
[[noreturn]] void Fail(const std::string& why) {
  fmt::print(stderr, "bx sim validate: {}\n", why);
  throw CLI::RuntimeError(2);
}

sim::IncastResult RunNs3(const std::string& binary, const sim::IncastScenario& s, bool even_paths) {
  std::string command = ShellQuote(binary);
  for (const std::string& arg : sim::Ns3Arguments(s, even_paths)) {
    command += " " + ShellQuote(arg);
  }
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) Fail("cannot run " + binary);
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe.get())) text.append(buf, n);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("flows")) {
    Fail("no JSON from " + command + " (is bx_ns3_incast built? --ns3 PATH)");
  }
  sim::IncastResult r;
  for (const auto& f : j["flows"]) {
    r.flows.push_back(
        {f["bytes"].get<uint64_t>(), f["background"].get<bool>(), f["fct_us"].get<double>()});
  }
  r.complete = j["complete"].get<bool>();
  r.queue_mean_bytes = j["queue_mean_bytes"].get<double>();
  r.queue_max_bytes = j["queue_max_bytes"].get<uint64_t>();
  r.queue_samples = j["queue_samples"].get<uint64_t>();
  r.ecn_marks = j["ecn_marks"].get<uint64_t>();
  r.drops = j["drops"].get<uint64_t>();
  return r;
}

double Ratio(double ours, double theirs) {
  return theirs > 0 ? ours / theirs : 0;
}

int RunValidate(const ValidateOptions& o) {
  std::vector<sim::IncastScenario> scenarios;
  for (const sim::IncastScenario& s : sim::ValidationScenarios()) {
    bool wanted = o.scenarios.empty();
    for (const std::string& name : o.scenarios) wanted = wanted || name == s.name;
    if (wanted) scenarios.push_back(s);
  }
  if (scenarios.empty()) throw CLI::ValidationError("--scenario", "no such scenario");
  std::string binary = o.ns3.empty() ? DefaultNs3Path() : o.ns3;

  nlohmann::json rows = nlohmann::json::array();
  bool agree = true;
  if (!o.json) {
    fmt::print("{:<26} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6} {:>7} {:>7}\n", "scenario", "P50 ours",
               "P50 ns-3", "ratio", "P99 ours", "P99 ns-3", "ratio", "q mean", "q max");
  }
  for (const sim::IncastScenario& s : scenarios) {
    sim::IncastScenario ours_s = s;
    if (o.ours_delay_us >= 0) ours_s.link_delay_ns = sim::TimeNs(o.ours_delay_us * 1000);
    ours_s.ecn_at_enqueue = o.ecn_at_enqueue;
    ours_s.tcp_acks_with_data = o.tcp_acks_with_data;
    ours_s.tcp_cwnd_limited = o.cwnd_limited;
    sim::IncastResult ours = sim::RunIncastScenario(ours_s);
    sim::IncastResult ns3 = RunNs3(binary, s, o.ns3_even_paths);
    double p50[2] = {sim::FctPercentile(ours, 0.5), sim::FctPercentile(ns3, 0.5)};
    double p99[2] = {sim::FctPercentile(ours, 0.99), sim::FctPercentile(ns3, 0.99)};
    double p50_ratio = Ratio(p50[0], p50[1]), p99_ratio = Ratio(p99[0], p99[1]);
    double qmean_ratio = Ratio(ours.queue_mean_bytes, ns3.queue_mean_bytes);
    double qmax_ratio = Ratio(double(ours.queue_max_bytes), double(ns3.queue_max_bytes));
    bool ok = ours.complete && ns3.complete;
    if (o.check > 0) {
      ok = ok && std::abs(p50_ratio - 1) <= o.check && std::abs(p99_ratio - 1) <= o.check;
    }
    agree = agree && ok;
    auto side = [](const sim::IncastResult& r, double p50v, double p99v) {
      nlohmann::json fcts = nlohmann::json::array();
      for (const sim::FlowResult& f : r.flows) fcts.push_back(f.fct_us);
      return nlohmann::json{{"fct_p50_us", p50v},
                            {"fct_p99_us", p99v},
                            {"fct_us", fcts},
                            {"complete", r.complete},
                            {"queue_mean_bytes", r.queue_mean_bytes},
                            {"queue_max_bytes", r.queue_max_bytes},
                            {"ecn_marks", r.ecn_marks},
                            {"drops", r.drops}};
    };
    // Flow by flow: meaningful where flows differ by path (ecmp-8x1M), not among an incast's
    // identical senders, whose finishing order is a tie the two simulators break differently.
    nlohmann::json flow_ratios = nlohmann::json::array();
    for (size_t i = 0; i < ours.flows.size() && i < ns3.flows.size(); ++i) {
      flow_ratios.push_back(Ratio(ours.flows[i].fct_us, ns3.flows[i].fct_us));
    }
    nlohmann::json paths = nlohmann::json::array();
    if (s.spines > 1) {
      for (const sim::EcmpPath& p : sim::EcmpPaths(s)) {
        paths.push_back({{"data_spine", p.data_spine}, {"ack_spine", p.ack_spine}});
      }
    }
    rows.push_back({{"scenario", s.name},
                    {"description", s.description},
                    {"ecmp_paths", paths},
                    {"ours", side(ours, p50[0], p99[0])},
                    {"ns3", side(ns3, p50[1], p99[1])},
                    {"p50_ratio", p50_ratio},
                    {"p99_ratio", p99_ratio},
                    {"queue_mean_ratio", qmean_ratio},
                    {"queue_max_ratio", qmax_ratio},
                    {"flow_fct_ratios", flow_ratios},
                    {"ok", ok}});
    if (!o.json) {
      fmt::print(
          "{:<26} {:>9.1f} {:>9.1f} {:>6.3f} {:>9.1f} {:>9.1f} {:>6.3f} {:>7.3f} {:>7.3f}{}\n",
          s.name, p50[0], p50[1], p50_ratio, p99[0], p99[1], p99_ratio, qmean_ratio, qmax_ratio,
          ok ? "" : "  MISMATCH");
    }
  }
  if (o.json) {
    nlohmann::json out{{"ns3", binary}, {"check", o.check}, {"agree", agree}, {"scenarios", rows}};
    if (o.ours_delay_us >= 0) out["ours_link_delay_us"] = o.ours_delay_us;
    out["ours_ecn_at_enqueue"] = o.ecn_at_enqueue;
    out["ours_tcp_acks"] = o.tcp_acks_with_data ? "with-data" : "first";
    out["ours_cwnd_limited"] = o.cwnd_limited;
    out["ns3_even_paths"] = o.ns3_even_paths;
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("FCT in us; ratios are ours / ns-3; q = bottleneck queue, sampled every 1 us{}\n",
               o.check > 0 ? fmt::format("; bound +-{:.0f}%: {}", o.check * 100,
                                         agree ? "agree" : "DISAGREE")
                           : "");
  }
  return agree ? 0 : 1;
}

}  // namespace

void AddSimValidateCommand(CLI::App* simulate) {
  auto options = std::make_shared<ValidateOptions>();
  CLI::App* validate = simulate->add_subcommand(
      "validate", "Cross-validate the TCP/DCTCP fabric model against ns-3");
  validate->add_option("--scenario", options->scenarios, "scenario name (repeatable; default all)");
  validate->add_option("--ns3", options->ns3, "bx_ns3_incast binary (default: next to bx)");
  validate->add_option("--check", options->check,
                       "fail if a P50 or P99 FCT ratio is off by more than this (0.15 = 15%)");
  validate->add_option("--ours-link-delay-us", options->ours_delay_us,
                       "control: a different link delay on our side only (should disagree)");
  validate->add_flag("--ecn-at-enqueue", options->ecn_at_enqueue,
                     "ours marks ECN on arrival, where ns-3's RED does (default: at dequeue)");
  AddTcpAcksOption(validate, &options->tcp_acks_with_data);  // ours only: ns-3 has one FIFO
  validate->add_flag("--ours-cwnd-limited", options->cwnd_limited,
                     "ours grows cwnd only while cwnd limits the sender, as Linux does (ns-3 "
                     "3.37 does not check)");
  validate->add_flag("--ns3-even-paths", options->ns3_even_paths,
                     "control: ns-3 deals the flows round-robin over the spines instead of taking "
                     "our ECMP hash's paths (should disagree where the hash collides)");
  validate->add_flag("--json", options->json, "JSON output");
  validate->callback([options] {
    int rc = RunValidate(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace bx::tools
