// Which device (and port) a process runs its RDMA on, chosen by locality.
//
// A host with several NICs has one per NUMA node (or per PCIe switch); a NIC on another node than
// the threads that post to it costs every doorbell, completion and DMA a trip across the
// inter-socket link. So, unless a device is named, bexpress prefers the NIC on the node of its
// I/O threads' CPUs (TransportOptions::io_cpus, BX_IO_CPUS), as the device's sysfs
// `device/numa_node` and the nodes' cpulists (base/cpu_nodes.h) say.
//
// The request (InitOptions::device, TransportOptions::device, BX_DEVICE) is empty, or a list of
// devices, each a device name or the network device its RoCE GIDs live on, and optionally
// ":<port>" ("mlx5_0:2,mlx5_1:1", as NCCL_IB_HCA): one entry is used as it is; several are the
// candidates locality chooses among. Without a port, the device's first active port is used.
//
// bemalloc registers its memory in one device's protection domain, so a process runs on one
// device: the one the most I/O threads prefer (ties: the earliest thread's). The plan still
// says, per I/O thread, which device its node would prefer, so an operator sees the cost.
//
// Threads: ChooseDevice from any thread; it opens each candidate briefly.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verbs/verbs.h"

namespace bx::verbs {

struct IoThreadPlacement {
  int cpu = -1;           // -1: not pinned
  int node = -1;          // the CPU's NUMA node; -1: unknown
  std::string preferred;  // the candidate on that node ("" when none is)
};

struct DeviceChoice {
  std::string device;  // as the library names it
  uint8_t port = 0;    // the port named in the request; 0: the device's first active port
  std::string reason;  // one line: why this device
  std::vector<IoThreadPlacement> io_threads;
};

// Parses the request and chooses among the library's devices for `io_threads` I/O threads
// pinned round robin to `io_cpus` (empty: not pinned; then the process's own CPU affinity
// decides, if it lies on one node). NotFound for a named device that does not exist,
// Unavailable when no candidate has an active port, InvalidArgument for a malformed request.
Result<DeviceChoice> ChooseDevice(Library& lib, std::string_view request,
                                  std::span<const int> io_cpus, int io_threads);

// Library::ForDevice(request's first entry), ChooseDevice on it, and the chosen device opened;
// the choice is recorded as the process's (RecordProcessChoice) and returned in *choice.
Result<Device> OpenChosenDevice(std::string_view request, std::span<const int> io_cpus,
                                int io_threads, DeviceChoice* choice);

// The request a process makes when its options name none: $BX_DEVICE, or "".
std::string_view DeviceRequestFromEnvironment();

// The choice that opened the process's registered device, recorded by whoever opened it (bx::Init
// or the first rdma transport) so that later transports and `bx devices` report the same.
void RecordProcessChoice(const DeviceChoice& choice);
// The recorded choice; an empty device when none was recorded.
DeviceChoice ProcessChoice();

}  // namespace bx::verbs
