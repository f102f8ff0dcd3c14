// Device profiles: the shapes of real NICs the simnic can take, so code meets the addressing it
// will meet on hardware. BX_SIM_PROFILE (alias BXSIM_PROFILE) names one profile for every device,
// or one per device index, comma-separated ("roce,ib": bxsim0 is RoCE, bxsim1 InfiniBand; the
// last name serves the devices beyond the list). A name may end in "@<node>", the NUMA node
// the device's sysfs `device/numa_node` reports ("roce@0,roce@1": a dual-NUMA host, bxsim0 on
// node 0, bxsim1 on node 1); without it the node is -1 (unknown), as for a device with no PCI
// affinity:
//
//   default  today's simnic: an Ethernet port with one GID (index 0, typed RoCE v2), MTU 4096,
//            256 bytes inline, parent domains, no checks beyond a global address vector.
//   roce     a RoCE v2 NIC as mlx5 shows one on a host with IPv4: GIDs 0/1 the IPv6 link-local
//            address as RoCE v1/v2, 2/3 the IPv4-mapped address as RoCE v1/v2; active MTU 1024
//            (Ethernet MTU 1500); 220 bytes inline; no parent domains. RTR refuses an address
//            vector without a GRH or with an empty GID entry; packets sent from a RoCE v1 GID or
//            with traffic class 0 are counted, since on a RoCE fabric they leave the lossless
//            class.
//   roce2    a dual-port RoCE v2 NIC whose port 1 is not cabled (DOWN, no addresses) and whose
//            port 2 is the roce profile's port: code that assumes port 1 fails on it.
//   ib       an InfiniBand HCA: link layer InfiniBand, a LID per port from the fabric's LID
//            registry, GID 0 = subnet prefix fe80:: + port GUID (type IB), MTU 4096, 188 bytes
//            inline. A QP reaches its peer by LID (is_global = 0) or by GID with a GRH.
//
// Addresses: each simnic device has a fabric address, fe80::<pid>:<index>, that the fabric
// routes by. Its IPv6 link-local GID is that address; its IPv4 address is 127.x.y.z with
// x.y.z = pid << 2 | index (every 127/8 address is local on Linux, so a bootstrap socket can
// listen on it); a LID is a registered alias.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bx::simnic {

// libibverbs' ibv_gid_type values (IBV_GID_TYPE_IB == IBV_GID_TYPE_ROCE_V1 in sysfs terms).
enum class GidType : uint8_t { kIb, kRoceV1, kRoceV2 };

struct GidEntry {
  ibv_gid gid{};
  GidType type = GidType::kRoceV2;
};

struct DeviceProfile {
  std::string_view name;
  uint8_t link_layer = IBV_LINK_LAYER_ETHERNET;
  ibv_mtu active_mtu = IBV_MTU_4096;
  uint32_t max_inline_data = 256;
  bool parent_domains = true;
  bool strict_addressing = false;  // RTR checks the address vector as the link layer demands
  uint32_t gid_table_length = 1;   // gid_tbl_len: the table's capacity; unused entries are empty
  uint8_t ports = 1;               // phys_port_cnt
  uint8_t first_cabled_port = 1;   // ports below it are DOWN for good, with empty GID tables
};

// The profile named `name`, or null.
const DeviceProfile* FindProfile(std::string_view name);
// The profile of device `index` from BX_SIM_PROFILE / BXSIM_PROFILE; an unknown name is reported
// on stderr once and replaced by the default profile.
const DeviceProfile& ProfileForDevice(int index);

// The NUMA node of device `index` from its BX_SIM_PROFILE entry ("roce@1": 1); -1 when the
// entry names none (an unparsable node is reported on stderr and read as -1).
int NumaNodeForDevice(int index);

// The GID table a device of `profile` at fabric address (pid, index) shows on port 1.
std::vector<GidEntry> MakeGidTable(const DeviceProfile& profile, uint32_t pid, uint32_t index);

// The device's IPv4 address (host order), or 0 when (pid, index) does not fit in 127/8.
uint32_t DeviceIpv4(uint32_t pid, uint32_t index);

// The fabric address a destination GID stands for: a link-local fabric address or one of the
// IPv4-mapped device addresses. False for any other GID (nothing on the fabric answers it).
bool ResolveGid(const ibv_gid& gid, ibv_gid* fabric_address);

}  // namespace bx::simnic
