// `bx selfcheck`: runs bx::verbs::RunSelfCheck and prints one line per check.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "verbs/selfcheck.h"

namespace bx::tools {
namespace {

struct SelfCheckFlags {
  bool json = false;
  verbs::SelfCheckOptions options;
};

int RunSelfCheckCommand(const SelfCheckFlags& flags) {
  verbs::SelfCheckReport report = verbs::RunSelfCheck(flags.options);
  if (flags.json) {
    nlohmann::ordered_json out;
    out["backend"] = report.backend;
    out["library"] = report.library;
    out["checks"] = nlohmann::ordered_json::array();
    for (const verbs::CheckResult& check : report.checks) {
      out["checks"].push_back(
          {{"name", check.name}, {"passed", check.passed}, {"detail", check.detail}});
    }
    out["passed"] = report.passed();
    out["failed"] = report.failed();
    fmt::print("{}\n", out.dump(2));
  } else {
    for (const verbs::CheckResult& check : report.checks) {
      fmt::print("{:<4} {:<18} {}\n", check.passed ? "ok" : "FAIL", check.name, check.detail);
    }
    fmt::print("selfcheck: {} passed, {} failed\n", report.passed(), report.failed());
  }
  return report.failed() == 0 && !report.checks.empty() ? 0 : 1;
}

}  // namespace

void AddSelfCheckCommand(CLI::App* app) {
  CLI::App* command = app->add_subcommand(
      "selfcheck", "Check SEND/RECV, RDMA WRITE, WRITE_WITH_IMM and READ between two devices");
  auto flags = std::make_shared<SelfCheckFlags>();
  command->add_flag("--json", flags->json, "Print JSON instead of one line per check");
  command->add_option("--device-a", flags->options.device_a, "Requester device")
      ->capture_default_str();
  command->add_option("--device-b", flags->options.device_b, "Responder device")
      ->capture_default_str();
  command->callback([flags] {
    if (int code = RunSelfCheckCommand(*flags); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace bx::tools
