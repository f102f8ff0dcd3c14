// The GID table queries of libibverbs 1.11 and the private ibv_query_gid_type that rdma-core's
// own tools call (ibv_devinfo -v). The simnic's port has one GID, at index 0, which it routes
// like a RoCE v2 GID: programs that look for a RoCE v2 entry find it.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "simnic/verbs_internal.h"

using namespace bx::simnic;

namespace {

// libibverbs' private enum ibv_gid_type_sysfs (rdma-core's driver.h, not installed).
enum GidTypeSysfs : int { kGidTypeSysfsIbRoceV1 = 0, kGidTypeSysfsRoceV2 = 1 };

void FillEntry(ibv_context* context, ibv_gid_entry* entry) {
  std::memset(entry, 0, sizeof(*entry));
  entry->gid = ToSim(context)->device->gid();
  entry->gid_index = 0;
  entry->port_num = 1;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = 0;  // no network device behind it
}

}  // namespace

extern "C" {

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                      ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (context == nullptr || entry == nullptr || flags != 0 || entry_size < sizeof(*entry) ||
      port_num != 1) {
    return EINVAL;
  }
  if (gid_index >= kGidTableLength) return ENODATA;
  FillEntry(context, entry);
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             uint32_t flags, size_t entry_size) {
  if (context == nullptr || entries == nullptr || flags != 0 || entry_size < sizeof(*entries)) {
    return -EINVAL;
  }
  if (max_entries < kGidTableLength) return -EINVAL;  // as libibverbs: the table must fit
  FillEntry(context, entries);
  return kGidTableLength;
}

int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  if (context == nullptr || type == nullptr || port_num != 1 || index >= kGidTableLength) {
    errno = EINVAL;
    return -1;
  }
  *type = kGidTypeSysfsRoceV2;
  return 0;
}

}  // extern "C"
