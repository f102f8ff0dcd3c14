// rdma://host:port: the socket interface over engines. Sockets to the same url share engines
// (QP multiplexing, paper section 6.1): by default one engine, one RC QP, per destination; a
// policy allows more for bandwidth and says how sockets spread over them. An engine's set-up runs
// the bootstrap handshake (bootstrap.h) over TCP; the bootstrap connection then stays open to
// detect peer death. Later sockets to the same destination open a channel on the engine in band,
// with no handshake. A connecting-side engine with no sockets left closes.
//
// Memory: messages are bemalloc Buffers, registered on bemalloc's device. The transport therefore
// runs on that device: the first RDMA transport of a process initialises bemalloc on its device
// (TransportOptions::device, else BX_DEVICE, else the device on its I/O threads' NUMA node, else
// the first device: verbs/device_choice.h) if nothing has yet; a later one naming another device
// alone is refused, since its QPs could not use bemalloc's keys.
//
// Threads: as include/bx/transport.h says. Listen/Connect block the calling thread for the
// handshake (bounded by the connect timeout, 5 s for accepted connections).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/io_thread.h"
#include "bx/transport.h"
#include "engine/engine.h"

namespace bx::rdma {

// A new rdma:// transport with TransportOptions::rdma (include/bx/transport.h).
Result<std::unique_ptr<Transport>> CreateRdmaTransport(const TransportOptions& options);

// What an rdma:// transport holds, for benchmarks, tests and operators.
struct RdmaEngineInfo {
  std::string peer;
  bool initiator;                            // the connecting side of this engine
  size_t sockets;                            // sockets multiplexed on it
  bool in_thread_domain;                     // its QP was created in its I/O thread's parent domain
  std::map<std::string, uint64_t> counters;  // engine counters (window, scheduler, credits...)
  // The QP's path as ibv_query_qp reports it (all zero where the library cannot query QPs).
  uint32_t send_psn = 0;     // our first send PSN
  uint32_t receive_psn = 0;  // the peer's first send PSN
  bool global = false;       // a GRH on every packet (RoCE; InfiniBand across subnets)
  uint8_t gid_index = 0;
  uint8_t traffic_class = 0;
  uint8_t service_level = 0;
  uint16_t remote_lid = 0;
  int path_mtu = 0;  // bytes
};
struct RdmaTransportInfo {
  int io_threads = 0;
  int thread_domains = 0;  // I/O threads that got a thread domain from the device
  int parent_domains = 0;  // ... and a parent domain carrying it
  // The device every QP uses and why (verbs/device_choice.h: the request, or the NUMA node of
  // the I/O threads' CPUs), and per I/O thread its CPU, that CPU's node and the device on that
  // node (empty when none is; it differs from `device` when the threads span nodes, since a
  // process runs on one device).
  std::string device;
  std::string device_reason;
  struct IoThreadDevice {
    int cpu = -1;  // -1: not pinned
    int node = -1;
    std::string preferred;
  };
  std::vector<IoThreadDevice> io_thread_devices;
  // How connections are addressed: the link layer and, for a connection bound to no particular
  // address, the GID chosen and why (verbs/port_address.h).
  int port = 0;  // the device port every QP uses: the one requested, else its first active one
  std::string link_layer;
  int gid_index = -1;
  std::string gid;
  std::string gid_reason;
  uint8_t traffic_class = 0;
  uint8_t service_level = 0;
  // Engines (QP, engine, receive buffers) ever set up, either side: a refused peer adds none.
  uint64_t engines_created = 0;
  // Bootstrap connections refused before anything was allocated (malformed Hello, failed
  // authentication, max_connections_per_peer).
  uint64_t peers_refused = 0;
  // The I/O threads' loops, summed: how often they polled, yielded and slept.
  IoThreadCounters io_loop;
  std::vector<RdmaEngineInfo> engines;
};
// `transport` must be an rdma:// transport (InvalidArgument otherwise). Visits every I/O
// thread and waits for it: call it from an application thread, never from a handler.
Result<RdmaTransportInfo> GetRdmaTransportInfo(Transport& transport);

// Makes "rdma" creatable through transport::CreateTransport.
void RegisterRdmaTransport();

}  // namespace bx::rdma
