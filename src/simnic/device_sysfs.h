// The simnic's devices as sysfs shows a real RNIC's, so that libraries that look a device up by
// its ibv_device paths (ibdev_path, dev_path) find it. Per process, without root and without
// touching /sys: ${BX_SIM_SYSFS_DIR:-${TMPDIR:-/tmp}}/bxsim-sysfs.<pid>/, laid out as
//
//   class/infiniband/<dev>/                       ibdev_path
//     node_guid  sys_image_guid  node_type  fw_ver  hca_type  hw_rev  board_id  node_desc
//     device/vendor  device/device
//     ports/1/{state, phys_state, rate, link_layer, lid, sm_lid, lid_mask_count, cap_mask}
//     ports/1/gids/<i>  ports/1/gid_attrs/types/<i>  ports/1/pkeys/0
//   class/infiniband_verbs/uverbs<n>/{ibdev, abi_version}   dev_path
//
// Not there: the PCI device behind it (device/ is a directory, not a link into /sys/devices),
// netdevs (gid_attrs/ndevs), counters and hw_counters, and the uverbs character device. The
// port's state files follow the link (bxsim_set_link). The directory is removed at exit;
// directories of processes that died without exiting are removed by the next process to start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bx::simnic {

class Device;

// Writes the directory for `devices` and points their ibdev_path and dev_path into it. Without a
// writable place the paths keep their placeholders and the simnic works as before.
void WriteSysfs(uint32_t pid, const std::vector<Device*>& devices);
// Rewrites the port state files of `device` (link up or down).
void UpdateSysfsPortState(Device* device);

}  // namespace bx::simnic
