#include <atomic>

#include "alloc/verbs_registrar.h"

#include <cerrno>
#include <string>

namespace bx::bemalloc {

Result<RegionKeys> VerbsRegistrar::Register(void* addr, size_t length) {
  errno = 0;
  ibv_mr* mr =
      device_.lib().RegMr(device_.pd(), addr, length, kRegionAccess | IBV_ACCESS_RELAXED_ORDERING);
  if (mr == nullptr) {
    return Status::FromErrno(errno != 0 ? errno : ENOMEM, "ibv_reg_mr(" + std::to_string(length) +
                                                              " bytes) on " + device_.name());
  }
  return RegionKeys{mr->lkey, mr->rkey, mr};
}

Status VerbsRegistrar::Deregister(const RegionKeys& keys) {
  int err = device_.lib().dereg_mr(static_cast<ibv_mr*>(keys.handle));
  return err == 0 ? Status::Ok() : Status::FromErrno(err, "ibv_dereg_mr on " + device_.name());
}

namespace {
std::atomic<verbs::Device*> g_registered_device{nullptr};
}  // namespace

Status Init(verbs::Device& device, const Options& options) {
  BX_RETURN_IF_ERROR(Init(std::make_unique<VerbsRegistrar>(device), options));
  g_registered_device.store(&device, std::memory_order_release);
  return Status::Ok();
}

verbs::Device* RegisteredDevice() {
  return g_registered_device.load(std::memory_order_acquire);
}

}  // namespace bx::bemalloc
