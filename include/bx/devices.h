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

// One device, the port bexpress uses (the one BX_DEVICE names, else its first active port; port
// 1 when none is) and its
// limits, as the device reports them.
struct BX_EXPORT DeviceInfo {
  std::string name;  // what InitOptions::device and TransportOptions::device take
  std::string kind;  // "sim" or "hardware"
  int port = 1;
  std::string port_state;  // as ibv_port_state_str says ("PORT_ACTIVE")
  std::string link_layer;  // "InfiniBand", "Ethernet" or "unspecified"
  std::string gid;         // GID index 0, as ibv_devinfo prints it
  int numa_node = -1;      // the NUMA node it is attached to (-1: unknown, or none)
  int active_mtu = 0;      // the port's active MTU, bytes
  uint16_t lid = 0;        // the port's LID (InfiniBand; 0 on RoCE)
  struct Gid {
    uint32_t index = 0;
    std::string address;  // "::ffff:10.0.0.7", "fe80::..."
    std::string type;     // "RoCE v1", "RoCE v2", "IB"
  };
  std::vector<Gid> gids;  // the port's valid GID entries
  // What an rdma:// transport uses on the port for a connection bound to no particular local
  // address (a connection takes the RoCE v2 GID of its bootstrap address when there is one),
  // after BX_GID_INDEX, BX_TRAFFIC_CLASS and BX_SERVICE_LEVEL. `gid_index` is -1 and
  // `gid_reason` says why when the port has no usable address.
  int gid_index = -1;
  std::string gid_reason;
  int traffic_class = -1;
  int service_level = -1;
  uint32_t max_qp = 0;
  uint32_t max_qp_wr = 0;
  uint32_t max_cq = 0;
  uint32_t max_cqe = 0;
  uint32_t max_mr = 0;
  uint64_t max_mr_size = 0;
};

// The device an rdma:// transport of this process would run on, and why: the request
// (BX_DEVICE: a device, or a list of candidates, each optionally "<name>:<port>"), else the
// device on the NUMA node of the I/O threads' CPUs (BX_IO_CPUS), else the first device. A process
// runs on one device (bemalloc registers on one), so each I/O thread's line says which device
// its node would prefer, and the process uses the one most threads prefer.
struct BX_EXPORT DeviceChoice {
  std::string device;  // empty when no device can be chosen; then `reason` says why
  int port = 0;        // the port the request named; 0: the device's first active port
  std::string reason;
  struct IoThread {
    int cpu = -1;           // -1: not pinned
    int node = -1;          // the CPU's NUMA node (-1: unknown)
    std::string preferred;  // the device on that node, "" when none has an active port there
  };
  std::vector<IoThread> io_threads;
};

struct BX_EXPORT DeviceList {
  std::string backend;  // "sim" or "system"
  std::string library;  // path of the verbs library loaded
  std::vector<DeviceInfo> devices;
  DeviceChoice choice;  // for the I/O threads ListDevices was asked about
};

// Every device of the verbs library BX_VERBS selects, and the choice for `io_threads` I/O
// threads pinned round robin to BX_IO_CPUS (0: one per CPU it names, or one). Unavailable, saying
// why, when no library loads or it has no device (ENOSYS on a kernel without RDMA).
BX_EXPORT Result<DeviceList> ListDevices();
BX_EXPORT Result<DeviceList> ListDevices(int io_threads);

}  // namespace bx
