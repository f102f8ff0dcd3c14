// VerbsRegistrar: registers bemalloc regions in a verbs device's protection domain.
//
// Access is LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | MW_BIND (the engine binds memory windows
// over single rendezvous destinations), plus IBV_ACCESS_RELAXED_ORDERING, an
// optional flag: the loader registers through ibv_reg_mr_iova2 when the library has it, and a
// device that does not support relaxed ordering ignores the flag, as libibverbs specifies.
//
// Threads: bemalloc serialises the calls; the device must outlive the registrar.
#pragma once

#include "bx/bemalloc.h"
#include "verbs/verbs.h"

namespace bx::bemalloc {

inline constexpr unsigned kRegionAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND;

class VerbsRegistrar : public Registrar {
 public:
  explicit VerbsRegistrar(verbs::Device& device) : device_(device) {}
  Result<RegionKeys> Register(void* addr, size_t length) override;
  Status Deregister(const RegionKeys& keys) override;

 private:
  verbs::Device& device_;
};

// bemalloc::Init (bx/bemalloc.h), registering through `device`'s protection domain (LOCAL_WRITE |
// REMOTE_WRITE | REMOTE_READ | MW_BIND, plus relaxed ordering where supported; MW_BIND lets the
// engine scope a rendezvous to one buffer with a memory window). `device` must outlive the
// process's use of bemalloc; the transport must use the same device so that the keys are valid on
// its QPs.
Status Init(verbs::Device& device, const Options& options = {});
// The device passed to Init(verbs::Device&), or nullptr (another registrar, or not initialised).
// The RDMA transport posts from its protection domain, where bemalloc's keys are valid.
verbs::Device* RegisteredDevice();

}  // namespace bx::bemalloc
