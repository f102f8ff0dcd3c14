// The RDMA devices this process can see, as `bx devices` lists them. Needs no bx::Init.
//
// BX_VERBS=sim|system|auto chooses the verbs library (the software NIC, libbx_simnic.so, or the
// system's libibverbs); the result says which one was loaded.
//
// Threads: ListDevices may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bx/export.h"
#include "bx/status.h"

namespace bx {

// One device, its port 1 and its limits, as the device reports them.
struct BX_EXPORT DeviceInfo {
  std::string name;        // what InitOptions::device and TransportOptions::device take
  std::string kind;        // "sim" or "hardware"
  std::string port_state;  // port 1, as ibv_port_state_str says ("PORT_ACTIVE")
  std::string link_layer;  // "InfiniBand", "Ethernet" or "unspecified"
  std::string gid;         // port 1, GID index 0, as ibv_devinfo prints it
  uint32_t max_qp = 0;
  uint32_t max_qp_wr = 0;
  uint32_t max_cq = 0;
  uint32_t max_cqe = 0;
  uint32_t max_mr = 0;
  uint64_t max_mr_size = 0;
};

struct BX_EXPORT DeviceList {
  std::string backend;  // "sim" or "system"
  std::string library;  // path of the verbs library loaded
  std::vector<DeviceInfo> devices;
};

// Every device of the verbs library BX_VERBS selects. Unavailable, saying why, when no library
// loads or it has no device (ENOSYS on a kernel without RDMA).
BX_EXPORT Result<DeviceList> ListDevices();

}  // namespace bx
