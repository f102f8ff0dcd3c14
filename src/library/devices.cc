// bx::ListDevices (include/bx/devices.h): the verbs layer's device list in public types.
#include "bx/devices.h"

#include "verbs/verbs.h"

namespace bx {

Result<DeviceList> ListDevices() {
  Result<verbs::Library*> library = verbs::Library::Get();
  if (!library.ok()) return library.status();
  Result<std::vector<verbs::DeviceInfo>> devices = verbs::ListDevices(**library);
  if (!devices.ok()) return devices.status();
  DeviceList list;
  list.backend = std::string(verbs::BackendName((*library)->backend()));
  list.library = (*library)->path();
  for (const verbs::DeviceInfo& d : *devices) {
    list.devices.push_back(DeviceInfo{d.name, d.kind, d.port_state, d.link_layer, d.gid, d.max_qp,
                                      d.max_qp_wr, d.max_cq, d.max_cqe, d.max_mr, d.max_mr_size});
  }
  return list;
}

}  // namespace bx
