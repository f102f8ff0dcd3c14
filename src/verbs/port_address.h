// How this side is addressed on an RDMA port, chosen as rdma_cm and NCCL choose it:
//
//   RoCE (link layer Ethernet): a source GID. Default: the RoCE v2 GID whose IP is the address
//     the bootstrap connection is bound to (IPv4-mapped or IPv6), else the first RoCE v2 GID
//     that is not link-local, else the first RoCE v2 GID; an explicit index (RdmaOptions::
//     gid_index, BX_GID_INDEX) overrides. No RoCE v2 GID and no override is an error: RoCE v1
//     does not cross an IP router and rarely sits in the lossless class.
//   InfiniBand: the port's LID (the path uses is_global = 0, dlid, sl), and GID 0 for the GRH
//     a peer in another subnet needs.
//
// The choice depends on the bootstrap connection, so it is made per connection; it costs one
// GID table query.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "verbs/rc_connect.h"
#include "verbs/verbs.h"

namespace bx::verbs {

struct GidTableEntry {
  uint32_t index = 0;
  ibv_gid gid{};
  ibv_gid_type type = IBV_GID_TYPE_ROCE_V2;
};

// What this side tells its peer and puts in its address vector.
struct PortAddress {
  uint8_t port = 1;
  uint8_t link_layer = IBV_LINK_LAYER_ETHERNET;
  ibv_mtu active_mtu = IBV_MTU_1024;
  uint16_t lid = 0;  // InfiniBand
  ibv_gid gid{};     // the source GID
  uint32_t gid_index = 0;
  ibv_gid_type gid_type = IBV_GID_TYPE_ROCE_V2;
  ibv_gid subnet_prefix_gid{};  // InfiniBand: GID 0, whose first 8 bytes are the subnet prefix
  std::string reason;           // one line: why this GID ("bootstrap address 10.0.0.7", ...)
};

// Port `port`'s valid GID entries: _ibv_query_gid_ex where the library has it, else
// ibv_query_gid with each entry's type from sysfs (gid_attrs/types), as libibverbs does.
Result<std::vector<GidTableEntry>> QueryGidTable(const Device& device, uint8_t port);

// The RoCE choice described above, on a table already read. `local` is the bootstrap socket's
// own address (null: none); `override_index` < 0 means no override.
Result<GidTableEntry> ChooseRoceGid(const std::vector<GidTableEntry>& table, const sockaddr* local,
                                    int override_index, std::string* reason);

// The address of `device`'s port `port` for a connection whose bootstrap socket is bound to
// `local`. FailedPrecondition, saying why, when the port is down or has no usable GID.
Result<PortAddress> ResolvePortAddress(const Device& device, uint8_t port, const sockaddr* local,
                                       int override_index);

// Sets the path fields of `rc` for a connection from `mine` to a peer at (`peer_lid`,
// `peer_gid`): our source GID index and, on InfiniBand, the peer's LID, with a GRH only when the
// peer's subnet prefix differs from ours.
void SetPath(const PortAddress& mine, uint16_t peer_lid, const ibv_gid& peer_gid, RcOptions* rc);

// The first active port of `device` (ports 1..phys_port_cnt), or Unavailable naming each
// port's state: a dual-port NIC whose port 1 is cabled elsewhere still works.
Result<uint8_t> FirstActivePort(const Device& device);
// `port` when it exists and is active; Unavailable naming its state otherwise (a port named in
// the device request, "mlx5_0:2").
Result<uint8_t> CheckPortActive(const Device& device, uint8_t port);

// The NUMA node the device is attached to (sysfs device/numa_node), or -1 when unknown.
int DeviceNumaNode(const Device& device);

// The GID index BX_GID_INDEX names, or `fallback` when it is unset (InvalidArgument when set
// to anything but 0..255).
Result<int> GidIndexFromEnvironment(int fallback);

std::string_view GidTypeName(ibv_gid_type type);   // "IB", "RoCE v1", "RoCE v2"
std::string FormatGidAddress(const ibv_gid& gid);  // "::ffff:10.0.0.7", "fe80::1"

}  // namespace bx::verbs
