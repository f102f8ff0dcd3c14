#include "verbs/device_list.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

namespace bx::verbs {

Result<DeviceList> DeviceList::Get(Library& lib) {
  int count = 0;
  errno = 0;
  ibv_device** list = lib.get_device_list(&count);
  if (list == nullptr) {
    int err = errno != 0 ? errno : ENODEV;
    std::string why = Status::FromErrno(err, "ibv_get_device_list").message();
    if (err == ENOSYS) why += " [ENOSYS: the kernel has no RDMA support]";
    return Unavailable("no RDMA devices in " + lib.path() + ": " + why);
  }
  DeviceList result(&lib, list, count);
  if (count <= 0) {
    return Unavailable("no RDMA devices in " + lib.path() + ": ibv_get_device_list found none");
  }
  return result;
}

DeviceList::DeviceList(DeviceList&& other) noexcept
    : lib_(other.lib_), list_(std::exchange(other.list_, nullptr)), count_(other.count_) {}

DeviceList::~DeviceList() {
  if (list_ != nullptr) lib_->free_device_list(list_);
}

ibv_device* DeviceList::Find(std::string_view name) const {
  for (ibv_device* device : devices()) {
    const char* device_name = lib_->get_device_name(device);
    if (device_name != nullptr && name == device_name) return device;
  }
  return nullptr;
}

ibv_device* DeviceList::FindByNetdev(std::string_view netdev) const {
  namespace fs = std::filesystem;
  for (ibv_device* device : devices()) {
    std::error_code ec;
    for (const fs::directory_entry& port : fs::directory_iterator(
             fs::path(device->ibdev_path) / "ports", fs::directory_options::none, ec)) {
      std::error_code ndev_ec;
      for (const fs::directory_entry& entry :
           fs::directory_iterator(port.path() / "gid_attrs" / "ndevs", ndev_ec)) {
        std::ifstream in(entry.path());
        std::string name;
        if (std::getline(in, name) && name == netdev) return device;
      }
    }
  }
  return nullptr;
}

std::string DeviceList::Names() const {
  std::string names;
  for (ibv_device* device : devices()) {
    if (!names.empty()) names += ", ";
    const char* device_name = lib_->get_device_name(device);
    names += device_name != nullptr ? device_name : "?";
  }
  return names;
}

}  // namespace bx::verbs
