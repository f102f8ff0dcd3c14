// `bx devices`: what bx::ListDevices sees, as a table or as JSON.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "bx/devices.h"
#include "commands.h"

namespace bx::tools {
namespace {

nlohmann::ordered_json Gids(const DeviceInfo& device) {
  auto gids = nlohmann::ordered_json::array();
  for (const DeviceInfo::Gid& g : device.gids)
    gids.push_back({{"index", g.index}, {"gid", g.address}, {"type", g.type}});
  return gids;
}

nlohmann::ordered_json ToJson(const DeviceInfo& device) {
  return {{"name", device.name},
          {"kind", device.kind},
          {"port", device.port},
          {"port_state", device.port_state},
          {"link_layer", device.link_layer},
          {"gid", device.gid},
          {"max_qp", device.max_qp},
          {"max_qp_wr", device.max_qp_wr},
          {"max_cq", device.max_cq},
          {"max_cqe", device.max_cqe},
          {"max_mr", device.max_mr},
          {"max_mr_size", device.max_mr_size},
          {"numa_node", device.numa_node},
          {"active_mtu", device.active_mtu},
          {"lid", device.lid},
          {"gids", Gids(device)},
          {"bexpress",
           {{"gid_index", device.gid_index},
            {"gid_reason", device.gid_reason},
            {"traffic_class", device.traffic_class},
            {"service_level", device.service_level}}}};
}

nlohmann::ordered_json ToJson(const DeviceChoice& choice) {
  auto threads = nlohmann::ordered_json::array();
  for (size_t i = 0; i < choice.io_threads.size(); ++i) {
    const DeviceChoice::IoThread& t = choice.io_threads[i];
    threads.push_back({{"io_thread", i},
                       {"cpu", t.cpu},
                       {"numa_node", t.node},
                       {"preferred", t.preferred},
                       {"uses", choice.device}});
  }
  return {{"device", choice.device},
          {"port", choice.port},
          {"reason", choice.reason},
          {"io_threads", threads}};
}

// Which NIC each I/O thread uses and why (verbs/device_choice.h).
void PrintChoice(const DeviceChoice& choice) {
  if (choice.device.empty()) {
    fmt::print("bexpress uses no device: {}\n", choice.reason);
    return;
  }
  fmt::print("bexpress uses {}{}: {}\n", choice.device,
             choice.port != 0 ? fmt::format(" port {}", choice.port) : "", choice.reason);
  for (size_t i = 0; i < choice.io_threads.size(); ++i) {
    const DeviceChoice::IoThread& t = choice.io_threads[i];
    const std::string where = t.cpu >= 0 ? fmt::format("cpu {}", t.cpu) : "not pinned";
    const std::string node = t.node >= 0 ? fmt::format("node {}", t.node) : "node unknown";
    std::string why;
    if (t.preferred.empty())
      why = "no device on its node";
    else if (t.preferred == choice.device)
      why = "its node's device";
    else
      why = fmt::format("its node's device is {}; one device per process", t.preferred);
    fmt::print("  io thread {}: {}, {} -> {} ({})\n", i, where, node, choice.device, why);
  }
}

void PrintTable(const DeviceList& list) {
  fmt::print("backend {} ({})\n", list.backend, list.library);
  fmt::print("{:<10} {:<8} {:<12} {:<11} {:<39} {:>8} {:>9} {:>8} {:>9} {:>8} {:>14}\n", "NAME",
             "KIND", "PORT", "LINK", "GID", "MAX_QP", "MAX_QP_WR", "MAX_CQ", "MAX_CQE", "MAX_MR",
             "MAX_MR_SIZE");
  for (const DeviceInfo& d : list.devices) {
    fmt::print("{:<10} {:<8} {:<12} {:<11} {:<39} {:>8} {:>9} {:>8} {:>9} {:>8} {:>14}\n", d.name,
               d.kind, d.port_state, d.link_layer, d.gid, d.max_qp, d.max_qp_wr, d.max_cq,
               d.max_cqe, d.max_mr, d.max_mr_size);
    // Port 1's addressing: MTU, LID, the GID table, and what bexpress will use.
    fmt::print("  numa node {}; port {}: mtu {}, lid {}\n", d.numa_node, d.port, d.active_mtu,
               d.lid);
    for (const DeviceInfo::Gid& g : d.gids) {
      const bool chosen = int(g.index) == d.gid_index;
      fmt::print("  gid {:>3}  {:<39} {}\n", g.index, g.address,
                 chosen ? fmt::format("{:<8}  <- bexpress", g.type) : g.type);
    }
    if (d.gid_index >= 0) {
      fmt::print("  bexpress: gid index {} ({}), traffic class {}, service level {}\n", d.gid_index,
                 d.gid_reason, d.traffic_class, d.service_level);
    } else {
      fmt::print("  bexpress: no usable address: {}\n", d.gid_reason);
    }
  }
}

int RunDevices(bool json, int io_threads) {
  Result<DeviceList> list = ListDevices(io_threads);
  if (!list.ok()) {
    fmt::print(stderr, "bx devices: {}\n", list.status().ToString());
    return 1;
  }
  if (!json) {
    PrintTable(*list);
    PrintChoice(list->choice);
    return 0;
  }
  nlohmann::ordered_json out;
  out["devices"] = nlohmann::ordered_json::array();
  for (const DeviceInfo& device : list->devices) out["devices"].push_back(ToJson(device));
  out["backend"] = list->backend;
  out["library"] = list->library;
  out["choice"] = ToJson(list->choice);
  fmt::print("{}\n", out.dump(2));
  return 0;
}

}  // namespace

void AddDevicesCommand(CLI::App* app) {
  CLI::App* command = app->add_subcommand(
      "devices", "List RDMA devices (BX_VERBS=auto|system|sim selects the verbs library)");
  auto json = std::make_shared<bool>(false);
  auto io_threads = std::make_shared<int>(0);
  command->add_flag("--json", *json, "Print JSON instead of a table");
  command->add_option("--io-threads", *io_threads,
                      "I/O threads to place on BX_IO_CPUS (default: one per CPU it names, or 1)");
  command->callback([json, io_threads] {
    if (int code = RunDevices(*json, *io_threads); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace bx::tools
