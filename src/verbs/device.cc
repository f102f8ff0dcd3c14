// Device: an opened device with a protection domain, and device discovery for `bx devices`.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "verbs/device_list.h"
#include "verbs/port_address.h"
#include "verbs/verbs.h"

namespace bx::verbs {
namespace {

std::string_view LinkLayerName(uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    default:
      return "unspecified";
  }
}

// The device to open when the caller names none.
std::string_view DefaultDeviceName() {
  const char* name = std::getenv("BX_DEVICE");
  return name != nullptr ? name : "";
}

}  // namespace

Result<Device> Device::Open(std::string_view name) {
  if (name.empty()) name = DefaultDeviceName();
  BX_ASSIGN_OR_RETURN(auto* lib, Library::ForDevice(name));
  return Open(*lib, name);
}

Result<Device> Device::Open(Library& lib, std::string_view name) {
  BX_ASSIGN_OR_RETURN(DeviceList list, DeviceList::Get(lib));
  // A device by its name, or by the network device one of its ports serves ("eth0").
  ibv_device* device = name.empty() ? list.devices().front() : list.Find(name);
  if (device == nullptr && !name.empty()) device = list.FindByNetdev(name);
  if (device == nullptr) {
    return NotFound("no RDMA device named '" + std::string(name) +
                    "', nor one serving a network "
                    "device of that name, in " +
                    lib.path() + "; devices: " + list.Names());
  }
  Device result;
  result.lib_ = &lib;
  result.name_ = lib.get_device_name(device);
  errno = 0;
  result.context_ = lib.open_device(device);
  if (result.context_ == nullptr) {
    return Status::FromErrno(errno != 0 ? errno : ENODEV, "ibv_open_device(" + result.name_ + ")");
  }
  if (int rc = lib.query_device(result.context_, &result.attr_); rc != 0) {
    return Status::FromErrno(rc, "ibv_query_device(" + result.name_ + ")");
  }
  errno = 0;
  result.pd_ = lib.alloc_pd(result.context_);
  if (result.pd_ == nullptr) {
    return Status::FromErrno(errno != 0 ? errno : ENOMEM, "ibv_alloc_pd(" + result.name_ + ")");
  }
  return result;
}

Device::Device(Device&& other) noexcept
    : lib_(other.lib_),
      context_(std::exchange(other.context_, nullptr)),
      pd_(std::exchange(other.pd_, nullptr)),
      name_(std::move(other.name_)),
      attr_(other.attr_) {}

Device& Device::operator=(Device&& other) noexcept {
  if (this != &other) {
    Close();
    lib_ = other.lib_;
    context_ = std::exchange(other.context_, nullptr);
    pd_ = std::exchange(other.pd_, nullptr);
    name_ = std::move(other.name_);
    attr_ = other.attr_;
  }
  return *this;
}

Device::~Device() {
  Close();
}

void Device::Close() {
  // Errors are ignored: EBUSY here means the caller leaked MRs or QPs, and a destructor has no
  // one to report it to.
  if (pd_ != nullptr) lib_->dealloc_pd(std::exchange(pd_, nullptr));
  if (context_ != nullptr) lib_->close_device(std::exchange(context_, nullptr));
}

ibv_port_attr Device::port(uint8_t port_num) const {
  ibv_port_attr attr{};
  if (lib_->QueryPort(context_, port_num, &attr) != 0) attr = ibv_port_attr{};
  return attr;
}

union ibv_gid Device::gid(uint8_t port_num, int index) const {
  union ibv_gid gid {};
  if (lib_->query_gid(context_, port_num, index, &gid) != 0) gid = {};
  return gid;
}

std::string FormatGid(const union ibv_gid& gid) {
  std::string text;
  for (int group = 0; group < 8; ++group) {
    char hex[6];
    std::snprintf(hex, sizeof(hex), "%s%02x%02x", group == 0 ? "" : ":", gid.raw[2 * group],
                  gid.raw[2 * group + 1]);
    text += hex;
  }
  return text;
}

Result<std::vector<DeviceInfo>> ListDevices() {
  BX_ASSIGN_OR_RETURN(auto* lib, Library::Get());
  return ListDevices(*lib);
}

Result<std::vector<DeviceInfo>> ListDevices(Library& lib, std::string_view port_device,
                                            uint8_t named_port) {
  BX_ASSIGN_OR_RETURN(DeviceList list, DeviceList::Get(lib));
  std::vector<DeviceInfo> infos;
  for (ibv_device* device : list.devices()) {
    BX_ASSIGN_OR_RETURN(Device opened, Device::Open(lib, lib.get_device_name(device)));
    const ibv_device_attr& attr = opened.attr();
    Result<uint8_t> active = FirstActivePort(opened);
    const uint8_t port_num = named_port != 0 && opened.name() == port_device ? named_port
                             : active.ok()                                   ? *active
                                                                             : 1;
    ibv_port_attr port = opened.port(port_num);
    DeviceInfo info;
    info.name = opened.name();
    info.kind = lib.is_sim() ? "sim" : "hardware";
    info.port_state = lib.port_state_str(port.state);
    info.link_layer = LinkLayerName(port.link_layer);
    info.port = port_num;
    info.gid = FormatGid(opened.gid(port_num, 0));
    info.active_mtu = port.active_mtu >= IBV_MTU_256 ? 128 << int(port.active_mtu) : 0;
    info.lid = port.lid;
    info.numa_node = DeviceNumaNode(opened);
    if (auto table = QueryGidTable(opened, port_num); table.ok()) {
      for (const GidTableEntry& e : *table)
        info.gids.push_back({e.index, FormatGidAddress(e.gid), std::string(GidTypeName(e.type))});
    }
    Result<int> override_index = GidIndexFromEnvironment(-1);
    Result<PortAddress> address =
        override_index.ok() ? ResolvePortAddress(opened, port_num, nullptr, *override_index)
                            : Result<PortAddress>(override_index.status());
    if (address.ok()) {
      info.gid_index = int(address->gid_index);
      info.gid_reason = address->reason;
    } else {
      info.gid_reason = address.status().ToString();
    }
    info.max_qp = static_cast<uint32_t>(attr.max_qp);
    info.max_qp_wr = static_cast<uint32_t>(attr.max_qp_wr);
    info.max_cq = static_cast<uint32_t>(attr.max_cq);
    info.max_cqe = static_cast<uint32_t>(attr.max_cqe);
    info.max_mr = static_cast<uint32_t>(attr.max_mr);
    info.max_mr_size = attr.max_mr_size;
    infos.push_back(std::move(info));
  }
  return infos;
}

}  // namespace bx::verbs
