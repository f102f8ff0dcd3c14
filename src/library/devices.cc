// bx::ListDevices (include/bx/devices.h): the verbs layer's device list and which library it
// came from.
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
  list.devices = std::move(devices).value();
  return list;
}

}  // namespace bx
