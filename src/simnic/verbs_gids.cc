// The GID table queries of libibverbs 1.11 and the private ibv_query_gid_type that rdma-core's
// own tools call (ibv_devinfo -v), over the device profile's table (device_profile.h). As on
// hardware, gid_tbl_len is the table's capacity: indexes past the valid entries are empty
// (ibv_query_gid gives the zero GID, _ibv_query_gid_ex ENODATA).
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "simnic/device.h"
#include "simnic/verbs_internal.h"

using namespace bx::simnic;

namespace {

// libibverbs' private enum ibv_gid_type_sysfs (rdma-core's driver.h, not installed).
enum GidTypeSysfs : int { kGidTypeSysfsIbRoceV1 = 0, kGidTypeSysfsRoceV2 = 1 };

ibv_gid_type PublicType(GidType type) {
  switch (type) {
    case GidType::kIb:
      return IBV_GID_TYPE_IB;
    case GidType::kRoceV1:
      return IBV_GID_TYPE_ROCE_V1;
    case GidType::kRoceV2:
      break;
  }
  return IBV_GID_TYPE_ROCE_V2;
}

void FillEntry(const Device& device, uint32_t port, uint32_t index, ibv_gid_entry* entry) {
  std::memset(entry, 0, sizeof(*entry));
  entry->gid = device.gid_table(port)[index].gid;
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = PublicType(device.gid_table(port)[index].type);
  entry->ndev_ifindex = 0;  // no network device behind it
}

}  // namespace

extern "C" {

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                      ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (context == nullptr || entry == nullptr || flags != 0 || entry_size < sizeof(*entry) ||
      !ToSim(context)->device->PortExists(port_num)) {
    return EINVAL;
  }
  const Device& device = *ToSim(context)->device;
  if (gid_index >= device.gid_table(port_num).size()) return ENODATA;
  FillEntry(device, port_num, gid_index, entry);
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             uint32_t flags, size_t entry_size) {
  if (context == nullptr || entries == nullptr || flags != 0 || entry_size < sizeof(*entries)) {
    return -EINVAL;
  }
  const Device& device = *ToSim(context)->device;
  size_t valid = 0;
  for (uint32_t port = 1; device.PortExists(port); ++port) valid += device.gid_table(port).size();
  if (max_entries < valid) return -EINVAL;  // as libibverbs: the valid entries of every port
  size_t n = 0;
  for (uint32_t port = 1; device.PortExists(port); ++port)
    for (size_t i = 0; i < device.gid_table(port).size(); ++i)
      FillEntry(device, port, uint32_t(i), &entries[n++]);
  return ssize_t(valid);
}

int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  if (context == nullptr || type == nullptr || !ToSim(context)->device->PortExists(port_num)) {
    errno = EINVAL;
    return -1;
  }
  const Device& device = *ToSim(context)->device;
  if (index >= device.profile().gid_table_length) {
    errno = EINVAL;
    return -1;
  }
  // An empty entry reads as IB/RoCE v1, as the kernel's sysfs shows it.
  const auto& table = device.gid_table(port_num);
  const bool v2 = index < table.size() && table[index].type == GidType::kRoceV2;
  *type = v2 ? kGidTypeSysfsRoceV2 : kGidTypeSysfsIbRoceV1;
  return 0;
}

}  // extern "C"
