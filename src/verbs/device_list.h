// DeviceList: ibv_get_device_list with its error cases folded into a Status, freed on
// destruction. Internal to src/verbs/. Thread-compatible.
#pragma once

#include <span>
#include <string>

#include "verbs/verbs.h"

namespace bx::verbs {

class DeviceList {
 public:
  // Lists the library's devices. Unavailable when there are none, naming why: libibverbs
  // returns NULL with errno ENOSYS when the kernel has no RDMA support, and an empty list when
  // it has support but no devices.
  static Result<DeviceList> Get(Library& lib);

  DeviceList(DeviceList&& other) noexcept;
  DeviceList& operator=(DeviceList&&) = delete;
  DeviceList(const DeviceList&) = delete;
  ~DeviceList();

  std::span<ibv_device* const> devices() const { return {list_, static_cast<size_t>(count_)}; }
  // The device called `name`, or null.
  // The device one of whose ports has a GID on the network device `netdev` ("eth0"), as sysfs
  // says (<ibdev_path>/ports/<n>/gid_attrs/ndevs/<index>); null when none has.
  ibv_device* FindByNetdev(std::string_view netdev) const;
  ibv_device* Find(std::string_view name) const;
  // "bxsim0, bxsim1": for error messages.
  std::string Names() const;

 private:
  DeviceList(Library* lib, ibv_device** list, int count) : lib_(lib), list_(list), count_(count) {}

  Library* lib_;
  ibv_device** list_;
  int count_;
};

}  // namespace bx::verbs
