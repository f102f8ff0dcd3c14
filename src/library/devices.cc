// bx::ListDevices (include/bx/devices.h): the verbs layer's device list and which library it
// came from.
#include "bx/devices.h"

#include "bx/transport.h"

#include "verbs/verbs.h"

namespace bx {

Result<DeviceList> ListDevices() {
  BX_ASSIGN_OR_RETURN(auto* library, verbs::Library::Get());
  DeviceList list;
  BX_ASSIGN_OR_RETURN(list.devices, verbs::ListDevices(*library));
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
