// bx::ListDevices (include/bx/devices.h): the verbs layer's device list and which library it
// came from.
#include "bx/devices.h"

#include "bx/transport.h"

#include "base/cpu_list.h"
#include "verbs/device_choice.h"
#include "verbs/verbs.h"

namespace bx {
namespace {

DeviceChoice ChoiceFor(verbs::Library& library, int io_threads) {
  DeviceChoice out;
  auto cpus = IoCpusFromEnvironment({});
  if (!cpus.ok()) {
    out.reason = cpus.status().ToString();
    return out;
  }
  if (io_threads <= 0) io_threads = std::max<int>(1, int(cpus->size()));
  auto choice =
      verbs::ChooseDevice(library, verbs::DeviceRequestFromEnvironment(), *cpus, io_threads);
  if (!choice.ok()) {
    out.reason = choice.status().ToString();
    return out;
  }
  out.device = choice->device;
  out.port = choice->port;
  out.reason = choice->reason;
  for (const verbs::IoThreadPlacement& p : choice->io_threads)
    out.io_threads.push_back({p.cpu, p.node, p.preferred});
  return out;
}

}  // namespace

Result<DeviceList> ListDevices() {
  return ListDevices(0);
}

Result<DeviceList> ListDevices(int io_threads) {
  BX_ASSIGN_OR_RETURN(auto* library, verbs::Library::Get());
  DeviceList list;
  list.choice = ChoiceFor(*library, io_threads);
  // The port a device request named is the one a transport would use there: show that one.
  BX_ASSIGN_OR_RETURN(list.devices,
                      verbs::ListDevices(*library, list.choice.device, uint8_t(list.choice.port)));
  list.backend = std::string(verbs::BackendName(library->backend()));
  list.library = library->path();
  // The class and level every rdma:// transport would give its QPs.
  Result<RdmaOptions> rdma = ApplyRdmaEnvironment(RdmaOptions{});
  for (DeviceInfo& device : list.devices) {
    if (!rdma.ok()) {
      device.gid_reason = rdma.status().ToString();
      continue;
    }
    device.traffic_class = rdma->traffic_class;
    device.service_level = rdma->service_level;
  }
  return list;
}

}  // namespace bx
