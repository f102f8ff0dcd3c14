#include "simnic/device_sysfs.h"

#include <endian.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <system_error>

#include "simnic/device.h"

namespace bx::simnic {
namespace {

namespace fs = std::filesystem;
constexpr char kPrefix[] = "bxsim-sysfs.";

std::mutex& SysfsMutex() {
  static auto* const mu = new std::mutex;
  return *mu;
}
// This process's directory, empty until written (never destroyed: read at exit), and the pid
// that wrote it (a forked child that exits must not remove its parent's).
std::string& SysfsDir() {
  static auto* const dir = new std::string;
  return *dir;
}
pid_t sysfs_owner = 0;

fs::path Root() {
  for (const char* name : {"BX_SIM_SYSFS_DIR", "TMPDIR"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return value;
  }
  return "/tmp";
}

// Directories left by processes that died without exiting (SIGKILL), and one of an earlier
// process with this pid.
void RemoveStale(const fs::path& root, uint32_t pid) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    char* end = nullptr;
    const unsigned long owner = std::strtoul(name.c_str() + sizeof(kPrefix) - 1, &end, 10);
    if (end == nullptr || *end != '\0') continue;
    if (owner == pid || (kill(pid_t(owner), 0) != 0 && errno == ESRCH)) {
      fs::remove_all(entry.path(), ec);
    }
  }
}

bool Put(const fs::path& file, const std::string& text) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  std::ofstream out(file, std::ios::trunc);
  out << text << '\n';
  return bool(out);
}

std::string Hex16Groups(const uint8_t* bytes, int groups) {
  std::string out;
  char part[6];
  for (int g = 0; g < groups; ++g) {
    std::snprintf(part, sizeof part, "%02x%02x", bytes[2 * g], bytes[2 * g + 1]);
    if (g > 0) out += ':';
    out += part;
  }
  return out;
}

std::string GuidText(uint64_t guid_be) {
  uint8_t bytes[8];
  std::memcpy(bytes, &guid_be, sizeof bytes);  // already big-endian: the bytes in order
  return Hex16Groups(bytes, 4);
}

void WritePortState(const fs::path& port, bool up) {
  Put(port / "state", up ? "4: ACTIVE" : "1: DOWN");
  Put(port / "phys_state", up ? "5: LinkUp" : "3: Disabled");
}

// One port's directory: state, link layer, LID, P_Key and its GID table with types.
bool WritePort(const fs::path& ibdev, Device* device, uint32_t number) {
  const fs::path port = ibdev / "ports" / std::to_string(number);
  WritePortState(port, device->PortUp(number));
  const bool ib = device->profile().link_layer == IBV_LINK_LAYER_INFINIBAND;
  char lid[16];
  std::snprintf(lid, sizeof lid, "0x%x", unsigned(device->lid()));
  bool ok = Put(port / "rate", "100 Gb/sec (4X EDR)") &&
            Put(port / "link_layer", ib ? "InfiniBand" : "Ethernet") && Put(port / "lid", lid) &&
            Put(port / "sm_lid", ib ? "0x1" : "0x0") && Put(port / "lid_mask_count", "0") &&
            Put(port / "cap_mask", "0x00000000") && Put(port / "pkeys" / "0", "0xffff");
  const auto& table = device->gid_table(number);
  for (uint32_t i = 0; ok && i < device->profile().gid_table_length; ++i) {
    const std::string name = std::to_string(i);
    const ibv_gid gid = i < table.size() ? table[i].gid : ibv_gid{};
    const bool v2 = i < table.size() && table[i].type == GidType::kRoceV2;
    ok = Put(port / "gids" / name, Hex16Groups(gid.raw, 8)) &&
         Put(port / "gid_attrs" / "types" / name, v2 ? "RoCE v2" : "IB/RoCE v1");
    // A RoCE GID belongs to a network device; the simnic's addresses live on loopback.
    if (ok && !ib && i < table.size()) ok = Put(port / "gid_attrs" / "ndevs" / name, "lo");
  }
  return ok;
}

fs::path IbdevDir(Device* device) {
  return fs::path(SysfsDir()) / "class" / "infiniband" / device->name();
}

bool WriteDevice(const fs::path& root, Device* device) {
  const fs::path ibdev = root / "class" / "infiniband" / device->name();
  const std::string guid = GuidText(device->guid_be());
  char host[64] = "localhost";
  gethostname(host, sizeof host - 1);
  bool ok =
      Put(ibdev / "node_guid", guid) && Put(ibdev / "sys_image_guid", guid) &&
      Put(ibdev / "node_type", "1: CA") && Put(ibdev / "fw_ver", "bxsim-1.0") &&
      Put(ibdev / "hca_type", "bxsim") && Put(ibdev / "hw_rev", "1") &&
      Put(ibdev / "board_id", "BXSIM-1") &&
      Put(ibdev / "node_desc", std::string(host) + " " + device->name()) &&
      Put(ibdev / "device" / "vendor", "0x0b5e") && Put(ibdev / "device" / "device", "0x0001") &&
      // No PCI device, so no NUMA affinity unless the profile gives one ("roce@1").
      Put(ibdev / "device" / "numa_node", std::to_string(NumaNodeForDevice(int(device->index()))));
  for (uint32_t p = 1; ok && device->PortExists(p); ++p) ok = WritePort(ibdev, device, p);
  const fs::path uverbs = root / "class" / "infiniband_verbs" /
                          (std::string("uverbs") + std::to_string(device->index()));
  ok = ok && Put(uverbs / "ibdev", device->name()) && Put(uverbs / "abi_version", "1");
  if (!ok) return false;
  ibv_device* ibv = device->ibv();
  std::snprintf(ibv->ibdev_path, sizeof ibv->ibdev_path, "%s", ibdev.c_str());
  std::snprintf(ibv->dev_path, sizeof ibv->dev_path, "%s", uverbs.c_str());
  return true;
}

void RemoveAtExit() {
  std::lock_guard lock(SysfsMutex());
  std::error_code ec;
  if (!SysfsDir().empty() && getpid() == sysfs_owner) fs::remove_all(SysfsDir(), ec);
}

}  // namespace

void WriteSysfs(uint32_t pid, const std::vector<Device*>& devices) {
  const fs::path root = Root();
  RemoveStale(root, pid);
  const fs::path dir = root / (std::string(kPrefix) + std::to_string(pid));
  // ibv_device paths hold 256 bytes; a longer root keeps the placeholders.
  if (dir.string().size() > 160) return;
  std::lock_guard lock(SysfsMutex());
  SysfsDir() = dir.string();  // removed at exit even if a device fails half-written
  sysfs_owner = getpid();
  std::atexit(RemoveAtExit);
  for (Device* device : devices) {
    if (!WriteDevice(dir, device)) return;
  }
}

void UpdateSysfsPortState(Device* device) {
  std::lock_guard lock(SysfsMutex());
  if (SysfsDir().empty()) return;
  for (uint32_t p = 1; device->PortExists(p); ++p)
    WritePortState(IbdevDir(device) / "ports" / std::to_string(p), device->PortUp(p));
}

}  // namespace bx::simnic
