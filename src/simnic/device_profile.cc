#include "simnic/device_profile.h"

#include <endian.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "simnic/device.h"

namespace bx::simnic {
namespace {

// Sizes are those of the NICs named in the header: mlx5 reports 220 bytes inline on RoCE, an
// EDR HCA's RC QP 188; the default keeps the simnic's historical 256.
constexpr std::array<DeviceProfile, 4> kProfiles{{
    {"default", IBV_LINK_LAYER_ETHERNET, IBV_MTU_4096, 256, true, false, 1},
    {"roce", IBV_LINK_LAYER_ETHERNET, IBV_MTU_1024, 220, false, true, 16},
    {"roce2", IBV_LINK_LAYER_ETHERNET, IBV_MTU_1024, 220, false, true, 16, 2, 2},
    {"ib", IBV_LINK_LAYER_INFINIBAND, IBV_MTU_4096, 188, true, true, 8},
}};

const char* ProfileEnv() {
  const char* v = std::getenv("BX_SIM_PROFILE");
  if (v == nullptr || *v == '\0') v = std::getenv("BXSIM_PROFILE");
  return v != nullptr ? v : "";
}

ibv_gid Ipv4Mapped(uint32_t ipv4) {
  ibv_gid gid{};
  gid.raw[10] = 0xff;
  gid.raw[11] = 0xff;
  uint32_t be = htobe32(ipv4);
  std::memcpy(&gid.raw[12], &be, 4);
  return gid;
}

}  // namespace

const DeviceProfile* FindProfile(std::string_view name) {
  for (const DeviceProfile& p : kProfiles)
    if (p.name == name) return &p;
  return nullptr;
}

namespace {

// Device `index`'s entry of BX_SIM_PROFILE ("roce@1"); the last entry serves the devices beyond
// the list.
std::string_view EntryForDevice(int index) {
  std::string_view list = ProfileEnv();
  std::string_view entry = "default";
  for (int i = 0; !list.empty(); ++i) {
    size_t comma = list.find(',');
    entry = list.substr(0, comma);
    if (i == index || comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return entry;
}

}  // namespace

const DeviceProfile& ProfileForDevice(int index) {
  std::string_view name = EntryForDevice(index);
  name = name.substr(0, name.find('@'));
  if (const DeviceProfile* p = FindProfile(name)) return *p;
  static bool warned = false;
  if (!warned) {
    warned = true;
    std::fprintf(stderr,
                 "bxsim: unknown device profile '%.*s' (default, roce, roce2, ib); using default\n",
                 int(name.size()), name.data());
  }
  return kProfiles[0];
}

int NumaNodeForDevice(int index) {
  const std::string_view entry = EntryForDevice(index);
  const size_t at = entry.find('@');
  if (at == std::string_view::npos) return -1;
  const std::string node(entry.substr(at + 1));
  char* end = nullptr;
  const long value = std::strtol(node.c_str(), &end, 10);
  if (node.empty() || *end != '\0' || value < 0 || value > 1023) {
    std::fprintf(stderr, "bxsim: NUMA node '%s' of device %d is not 0..1023; using -1\n",
                 node.c_str(), index);
    return -1;
  }
  return int(value);
}

uint32_t DeviceIpv4(uint32_t pid, uint32_t index) {
  if (index > 3 || pid >= (1u << 22) || pid == 0) return 0;
  return (127u << 24) | (pid << 2) | index;
}

std::vector<GidEntry> MakeGidTable(const DeviceProfile& profile, uint32_t pid, uint32_t index) {
  const ibv_gid link_local = MakeGid(pid, index);
  if (profile.link_layer == IBV_LINK_LAYER_INFINIBAND) return {{link_local, GidType::kIb}};
  if (!profile.strict_addressing) return {{link_local, GidType::kRoceV2}};
  std::vector<GidEntry> table{{link_local, GidType::kRoceV1}, {link_local, GidType::kRoceV2}};
  if (uint32_t ipv4 = DeviceIpv4(pid, index); ipv4 != 0) {
    table.push_back({Ipv4Mapped(ipv4), GidType::kRoceV1});
    table.push_back({Ipv4Mapped(ipv4), GidType::kRoceV2});
  }
  return table;
}

bool ResolveGid(const ibv_gid& gid, ibv_gid* fabric_address) {
  uint32_t pid = 0, index = 0;
  if (ParseGid(gid, &pid, &index)) {
    *fabric_address = gid;
    return true;
  }
  static const uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid.raw, kMappedPrefix, sizeof kMappedPrefix) != 0 || gid.raw[12] != 127)
    return false;
  uint32_t low = (uint32_t(gid.raw[13]) << 16) | (uint32_t(gid.raw[14]) << 8) | gid.raw[15];
  pid = low >> 2;
  index = low & 3;
  if (pid == 0) return false;
  *fabric_address = MakeGid(pid, index);
  return true;
}

}  // namespace bx::simnic
