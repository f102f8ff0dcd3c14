#include "verbs/port_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace bx::verbs {
namespace {

bool IsZero(const ibv_gid& gid) {
  static const ibv_gid kZero{};
  return std::memcmp(gid.raw, kZero.raw, sizeof gid.raw) == 0;
}

bool IsLinkLocal(const ibv_gid& gid) {
  return gid.raw[0] == 0xfe && (gid.raw[1] & 0xc0) == 0x80;
}

// The local address as a GID: IPv4 as IPv4-mapped IPv6 (as RoCE v2 GIDs carry it).
std::optional<ibv_gid> AddressAsGid(const sockaddr* address) {
  if (address == nullptr) return std::nullopt;
  ibv_gid gid{};
  if (address->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    gid.raw[10] = gid.raw[11] = 0xff;
    std::memcpy(&gid.raw[12], &in->sin_addr, 4);
    return gid;
  }
  if (address->sa_family == AF_INET6) {
    std::memcpy(gid.raw, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, 16);
    return gid;
  }
  return std::nullopt;
}

// sysfs names a GID's type "IB/RoCE v1" or "RoCE v2".
ibv_gid_type SysfsGidType(ibv_context* context, uint8_t port, uint32_t index, bool infiniband) {
  if (infiniband) return IBV_GID_TYPE_IB;
  std::ifstream in(std::string(context->device->ibdev_path) + "/ports/" + std::to_string(port) +
                   "/gid_attrs/types/" + std::to_string(index));
  std::string text;
  std::getline(in, text);
  return text == "RoCE v2" ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
}

}  // namespace

std::string_view GidTypeName(ibv_gid_type type) {
  switch (type) {
    case IBV_GID_TYPE_IB:
      return "IB";
    case IBV_GID_TYPE_ROCE_V1:
      return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2:
      return "RoCE v2";
  }
  return "unknown";
}

std::string FormatGidAddress(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = "";
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

Result<std::vector<GidTableEntry>> QueryGidTable(const Device& device, uint8_t port) {
  Library& lib = device.lib();
  const ibv_port_attr attr = device.port(port);
  if (attr.gid_tbl_len <= 0)
    return Unavailable("port " + std::to_string(port) + " of " + device.name() +
                       " reports no GID table");
  const bool infiniband = attr.link_layer == IBV_LINK_LAYER_INFINIBAND;
  std::vector<GidTableEntry> table;
  for (uint32_t i = 0; i < uint32_t(attr.gid_tbl_len); ++i) {
    GidTableEntry entry;
    entry.index = i;
    if (lib.query_gid_ex != nullptr) {
      ibv_gid_entry raw{};
      int rc = lib.query_gid_ex(device.context(), port, i, &raw, 0, sizeof raw);
      if (rc == ENODATA) continue;  // an empty entry
      if (rc != 0)
        return Status::FromErrno(rc, "ibv_query_gid_ex(index " + std::to_string(i) + ")");
      entry.gid = raw.gid;
      entry.type = ibv_gid_type(raw.gid_type);
    } else {
      if (lib.query_gid(device.context(), port, int(i), &entry.gid) != 0) continue;
      entry.type = SysfsGidType(device.context(), port, i, infiniband);
    }
    if (IsZero(entry.gid)) continue;
    table.push_back(entry);
  }
  return table;
}

Result<GidTableEntry> ChooseRoceGid(const std::vector<GidTableEntry>& table, const sockaddr* local,
                                    int override_index, std::string* reason) {
  if (override_index >= 0) {
    for (const GidTableEntry& e : table) {
      if (e.index != uint32_t(override_index)) continue;
      *reason = "GID index " + std::to_string(override_index) + " as configured";
      return e;
    }
    return InvalidArgument("GID index " + std::to_string(override_index) +
                           " is empty or out of the port's table");
  }
  const GidTableEntry* first_v2 = nullptr;
  const GidTableEntry* first_routable_v2 = nullptr;
  const std::optional<ibv_gid> wanted = AddressAsGid(local);
  for (const GidTableEntry& e : table) {
    if (e.type != IBV_GID_TYPE_ROCE_V2) continue;
    if (wanted && std::memcmp(e.gid.raw, wanted->raw, 16) == 0) {
      *reason = "RoCE v2 GID of the bootstrap address " + FormatGidAddress(e.gid);
      return e;
    }
    if (first_v2 == nullptr) first_v2 = &e;
    if (first_routable_v2 == nullptr && !IsLinkLocal(e.gid)) first_routable_v2 = &e;
  }
  const GidTableEntry* chosen = first_routable_v2 != nullptr ? first_routable_v2 : first_v2;
  if (chosen == nullptr) {
    return FailedPrecondition(
        "no RoCE v2 GID on the port (RoCE v1 does not cross an IP router): give the port's "
        "netdev an IP address, or choose an index with BX_GID_INDEX / RdmaOptions::gid_index");
  }
  *reason = std::string(wanted ? "bootstrap address has no GID; " : "") + "first " +
            (chosen == first_routable_v2 ? "routable " : "link-local ") + "RoCE v2 GID";
  return *chosen;
}

Result<PortAddress> ResolvePortAddress(const Device& device, uint8_t port, const sockaddr* local,
                                       int override_index) {
  const ibv_port_attr attr = device.port(port);
  const std::string where = device.name() + " port " + std::to_string(port);
  if (attr.state != IBV_PORT_ACTIVE)
    return FailedPrecondition(where + " is not active (" + device.lib().port_state_str(attr.state) +
                              ")");
  PortAddress address;
  address.port = port;
  address.link_layer = attr.link_layer == IBV_LINK_LAYER_INFINIBAND ? IBV_LINK_LAYER_INFINIBAND
                                                                    : IBV_LINK_LAYER_ETHERNET;
  address.active_mtu = attr.active_mtu;
  address.lid = attr.lid;
  auto table = QueryGidTable(device, port);
  if (!table.ok()) return table.status().WithContext(where);
  if (address.link_layer == IBV_LINK_LAYER_INFINIBAND) {
    if (attr.lid == 0 || attr.lid >= 0xc000)
      return FailedPrecondition(where + " has no unicast LID (is a subnet manager running?)");
    if (!table->empty()) address.subnet_prefix_gid = table->front().gid;
    const int index = override_index >= 0 ? override_index : 0;
    bool found = false;
    for (const GidTableEntry& e : *table) {
      if (e.index != uint32_t(index)) continue;
      address.gid = e.gid;
      address.gid_index = e.index;
      address.gid_type = IBV_GID_TYPE_IB;
      found = true;
    }
    if (!found)
      return InvalidArgument(where + ": GID index " + std::to_string(index) +
                             " is empty or out of the port's table");
    address.reason = "InfiniBand: LID " + std::to_string(attr.lid) + ", GID index " +
                     std::to_string(index) + " for a GRH";
    return address;
  }
  std::string reason;
  auto chosen = ChooseRoceGid(*table, local, override_index, &reason);
  if (!chosen.ok()) return chosen.status().WithContext(where);
  address.gid = chosen->gid;
  address.gid_index = chosen->index;
  address.gid_type = chosen->type;
  address.reason = std::move(reason);
  return address;
}

void SetPath(const PortAddress& mine, uint16_t peer_lid, const ibv_gid& peer_gid, RcOptions* rc) {
  rc->gid_index = uint8_t(mine.gid_index);
  if (mine.link_layer != IBV_LINK_LAYER_INFINIBAND) return;  // RoCE: always a GRH
  rc->remote_lid = peer_lid;
  rc->global = std::memcmp(mine.subnet_prefix_gid.raw, peer_gid.raw, 8) != 0;
}

Result<uint8_t> FirstActivePort(const Device& device) {
  std::string states;
  const int ports = std::max<int>(device.attr().phys_port_cnt, 1);
  for (int port = 1; port <= ports; ++port) {
    const ibv_port_attr attr = device.port(uint8_t(port));
    if (attr.state == IBV_PORT_ACTIVE) return uint8_t(port);
    states += (states.empty() ? "" : ", ") + std::to_string(port) + " " +
              device.lib().port_state_str(attr.state);
  }
  return Unavailable("no active port on " + device.name() + " (ports: " + states + ")");
}

Result<uint8_t> CheckPortActive(const Device& device, uint8_t port) {
  if (port < 1 || port > std::max<int>(device.attr().phys_port_cnt, 1))
    return InvalidArgument(device.name() + " has no port " + std::to_string(port) + " (ports 1.." +
                           std::to_string(std::max<int>(device.attr().phys_port_cnt, 1)) + ")");
  const ibv_port_attr attr = device.port(port);
  if (attr.state != IBV_PORT_ACTIVE)
    return Unavailable("port " + std::to_string(port) + " of " + device.name() + " is " +
                       device.lib().port_state_str(attr.state));
  return port;
}

int DeviceNumaNode(const Device& device) {
  std::ifstream in(std::string(device.context()->device->ibdev_path) + "/device/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;
}

Result<int> GidIndexFromEnvironment(int fallback) {
  const char* text = std::getenv("BX_GID_INDEX");
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 255)
    return InvalidArgument("BX_GID_INDEX='" + std::string(text) + "' is not a GID index 0..255");
  return int(value);
}

}  // namespace bx::verbs
