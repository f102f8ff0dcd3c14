#include "verbs/device_choice.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>

#include "base/cpu_nodes.h"
#include "verbs/device_list.h"
#include "verbs/port_address.h"

namespace bx::verbs {
namespace {

struct Candidate {
  std::string name;
  uint8_t port = 0;
  int node = -1;
};

// The node sysfs gives the device (<ibdev_path>/device/numa_node), without opening it.
int NumaNodeOf(const ibv_device* device) {
  std::ifstream in(std::string(device->ibdev_path) + "/device/numa_node");
  int node = -1;
  return in >> node ? node : -1;
}

// "mlx5_0:2" -> ("mlx5_0", 2); a name without a port -> port 0.
Status ParseEntry(std::string_view entry, std::string_view request, std::string* name,
                  uint8_t* port) {
  const size_t colon = entry.rfind(':');
  *name = std::string(entry.substr(0, colon));
  *port = 0;
  if (colon != std::string_view::npos) {
    const std::string_view text = entry.substr(colon + 1);
    int value = 0;
    auto [ptr, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || ptr != text.data() + text.size() || value < 1 || value > 255)
      return InvalidArgument("device request '" + std::string(request) + "': '" +
                             std::string(entry) + "' does not end in a port 1..255");
    *port = uint8_t(value);
  }
  if (name->empty())
    return InvalidArgument("device request '" + std::string(request) + "' has an empty entry");
  return Status::Ok();
}

Result<std::vector<Candidate>> Candidates(Library& lib, const DeviceList& list,
                                          std::string_view request) {
  std::vector<Candidate> candidates;
  if (request.empty()) {
    for (ibv_device* device : list.devices())
      candidates.push_back({lib.get_device_name(device), 0, NumaNodeOf(device)});
    return candidates;
  }
  size_t start = 0;
  while (start <= request.size()) {
    const size_t comma = std::min(request.find(',', start), request.size());
    Candidate c;
    BX_RETURN_IF_ERROR(ParseEntry(request.substr(start, comma - start), request, &c.name, &c.port));
    start = comma + 1;
    ibv_device* device = list.Find(c.name);
    if (device == nullptr) device = list.FindByNetdev(c.name);
    if (device == nullptr)
      return NotFound("no RDMA device named '" + c.name +
                      "', nor one serving a network device of that name, in " + lib.path() +
                      "; devices: " + list.Names());
    c.name = lib.get_device_name(device);
    c.node = NumaNodeOf(device);
    candidates.push_back(std::move(c));
  }
  return candidates;
}

// The node every CPU this process may run on belongs to; -1 when they span several or none is
// known.
int AffinityNode(const CpuNodes& nodes) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return -1;
  int node = -2;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    const int n = nodes.NodeOf(cpu);
    if (n < 0 || (node != -2 && n != node)) return -1;
    node = n;
  }
  return node < 0 ? -1 : node;
}

// Whether `c` can carry connections: its named port, or any port, is active.
bool HasActivePort(Library& lib, const Candidate& c) {
  auto device = Device::Open(lib, c.name);
  if (!device.ok()) return false;
  if (c.port != 0) return device->port(c.port).state == IBV_PORT_ACTIVE;
  return FirstActivePort(*device).ok();
}

std::string CpuText(const std::vector<IoThreadPlacement>& threads, const std::string& device) {
  std::set<int> cpus;
  for (const IoThreadPlacement& t : threads)
    if (t.preferred == device && t.cpu >= 0) cpus.insert(t.cpu);
  if (cpus.empty()) return "this process's CPUs";
  std::string text = cpus.size() == 1 ? "CPU " : "CPUs ";
  for (int cpu : cpus) {
    if (text.back() != ' ') text += ',';
    text += std::to_string(cpu);
  }
  return text;
}

}  // namespace

std::string_view DeviceRequestFromEnvironment() {
  const char* name = std::getenv("BX_DEVICE");
  return name != nullptr ? name : "";
}

Result<DeviceChoice> ChooseDevice(Library& lib, std::string_view request,
                                  std::span<const int> io_cpus, int io_threads) {
  BX_ASSIGN_OR_RETURN(DeviceList list, DeviceList::Get(lib));
  BX_ASSIGN_OR_RETURN(std::vector<Candidate> candidates, Candidates(lib, list, request));
  auto nodes = CpuNodes::Read();
  if (!nodes.ok()) return nodes.status().WithContext("choosing an RDMA device");
  const int affinity_node = io_cpus.empty() ? AffinityNode(*nodes) : -1;

  DeviceChoice choice;
  std::vector<const Candidate*> usable_on_node;  // per thread: the candidate it prefers
  for (int i = 0; i < std::max(1, io_threads); ++i) {
    IoThreadPlacement t;
    if (!io_cpus.empty()) t.cpu = io_cpus[size_t(i) % io_cpus.size()];
    t.node = t.cpu >= 0 ? nodes->NodeOf(t.cpu) : affinity_node;
    const Candidate* preferred = nullptr;
    for (const Candidate& c : candidates) {
      // Only a device that can carry connections is worth preferring; this opens just the
      // devices on the threads' nodes.
      if (t.node >= 0 && c.node == t.node && HasActivePort(lib, c)) {
        preferred = &c;
        break;
      }
    }
    if (preferred != nullptr) t.preferred = preferred->name;
    usable_on_node.push_back(preferred);
    choice.io_threads.push_back(std::move(t));
  }

  // One device per process: the one the most threads prefer, the earliest thread's on a tie.
  const Candidate* chosen = nullptr;
  int best = 0;
  for (const Candidate* c : usable_on_node) {
    if (c == nullptr) continue;
    const int votes = int(std::count(usable_on_node.begin(), usable_on_node.end(), c));
    if (votes > best) {
      best = votes;
      chosen = c;
    }
  }
  const std::string map_note =
      nodes->source() == "sysfs" ? "" : " (CPU map from " + std::string(nodes->source()) + ")";
  if (candidates.size() == 1) {
    chosen = &candidates.front();
    choice.reason =
        request.empty() ? "the only device" : "named by the request '" + std::string(request) + "'";
  } else if (chosen != nullptr) {
    choice.reason = "NUMA node " + std::to_string(chosen->node) + ", that of I/O " +
                    CpuText(choice.io_threads, chosen->name) + map_note;
  } else {
    chosen = &candidates.front();
    std::string why;
    const bool any_node = std::any_of(candidates.begin(), candidates.end(),
                                      [](const Candidate& c) { return c.node >= 0; });
    if (!any_node)
      why = "no device reports a NUMA node";
    else if (io_cpus.empty() && affinity_node < 0)
      why =
          "I/O threads not pinned (BX_IO_CPUS) and the process's CPUs span several or unknown "
          "NUMA nodes";
    else
      why = "no candidate with an active port on the I/O threads' NUMA node";
    choice.reason = "the first " + std::string(request.empty() ? "device" : "candidate") + " (" +
                    why + ")" + map_note;
  }
  choice.device = chosen->name;
  choice.port = chosen->port;
  return choice;
}

Result<Device> OpenChosenDevice(std::string_view request, std::span<const int> io_cpus,
                                int io_threads, DeviceChoice* choice) {
  BX_ASSIGN_OR_RETURN(Library * lib, Library::ForDevice(request.substr(0, request.find(','))));
  BX_ASSIGN_OR_RETURN(*choice, ChooseDevice(*lib, request, io_cpus, io_threads));
  BX_ASSIGN_OR_RETURN(Device device, Device::Open(*lib, choice->device));
  RecordProcessChoice(*choice);
  return device;
}

namespace {
std::mutex g_choice_mu;
DeviceChoice g_choice;  // guarded by g_choice_mu
}  // namespace

void RecordProcessChoice(const DeviceChoice& choice) {
  std::lock_guard lock(g_choice_mu);
  g_choice = choice;
}

DeviceChoice ProcessChoice() {
  std::lock_guard lock(g_choice_mu);
  return g_choice;
}

}  // namespace bx::verbs
