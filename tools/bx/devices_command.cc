// `bx devices`: what Library::Get() sees, as a table or as JSON.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "verbs/verbs.h"

namespace bx::tools {
namespace {

nlohmann::ordered_json ToJson(const verbs::DeviceInfo& device) {
  return {{"name", device.name},
          {"kind", device.kind},
          {"port_state", device.port_state},
          {"link_layer", device.link_layer},
          {"gid", device.gid},
          {"max_qp", device.max_qp},
          {"max_qp_wr", device.max_qp_wr},
          {"max_cq", device.max_cq},
          {"max_cqe", device.max_cqe},
          {"max_mr", device.max_mr},
          {"max_mr_size", device.max_mr_size}};
}

void PrintTable(const verbs::Library& lib, const std::vector<verbs::DeviceInfo>& devices) {
  fmt::print("backend {} ({})\n", verbs::BackendName(lib.backend()), lib.path());
  fmt::print("{:<10} {:<8} {:<12} {:<11} {:<39} {:>8} {:>9} {:>8} {:>9} {:>8} {:>14}\n", "NAME",
             "KIND", "PORT", "LINK", "GID", "MAX_QP", "MAX_QP_WR", "MAX_CQ", "MAX_CQE", "MAX_MR",
             "MAX_MR_SIZE");
  for (const verbs::DeviceInfo& d : devices) {
    fmt::print("{:<10} {:<8} {:<12} {:<11} {:<39} {:>8} {:>9} {:>8} {:>9} {:>8} {:>14}\n", d.name,
               d.kind, d.port_state, d.link_layer, d.gid, d.max_qp, d.max_qp_wr, d.max_cq,
               d.max_cqe, d.max_mr, d.max_mr_size);
  }
}

int RunDevices(bool json) {
  Result<verbs::Library*> lib = verbs::Library::Get();
  if (!lib.ok()) {
    fmt::print(stderr, "bx devices: {}\n", lib.status().ToString());
    return 1;
  }
  Result<std::vector<verbs::DeviceInfo>> devices = verbs::ListDevices(*lib.value());
  if (!devices.ok()) {
    fmt::print(stderr, "bx devices: {}\n", devices.status().ToString());
    return 1;
  }
  if (!json) {
    PrintTable(*lib.value(), devices.value());
    return 0;
  }
  nlohmann::ordered_json out;
  out["devices"] = nlohmann::ordered_json::array();
  for (const verbs::DeviceInfo& device : devices.value()) out["devices"].push_back(ToJson(device));
  out["backend"] = verbs::BackendName(lib.value()->backend());
  out["library"] = lib.value()->path();
  fmt::print("{}\n", out.dump(2));
  return 0;
}

}  // namespace

void AddDevicesCommand(CLI::App* app) {
  CLI::App* command = app->add_subcommand(
      "devices", "List RDMA devices (BX_VERBS=auto|system|sim selects the verbs library)");
  auto json = std::make_shared<bool>(false);
  command->add_flag("--json", *json, "Print JSON instead of a table");
  command->callback([json] {
    if (int code = RunDevices(*json); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace bx::tools
