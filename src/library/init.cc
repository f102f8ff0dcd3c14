#include "bx/init.h"

#include <memory>
#include <mutex>
#include <string>

#include "alloc/verbs_registrar.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "verbs/verbs.h"

namespace bx {
namespace {

// bemalloc for a TCP-only process: ordinary memory, no NIC to register it with.
class HostMemoryRegistrar : public bemalloc::Registrar {
 public:
  Result<bemalloc::RegionKeys> Register(void*, size_t) override { return bemalloc::RegionKeys{}; }
  Status Deregister(const bemalloc::RegionKeys&) override { return Status::Ok(); }
};

struct InitState {
  std::mutex mu;
  bool done = false;
  bool rdma = false;
  std::string device;  // the device actually opened
};

InitState& State() {
  static InitState* const state = new InitState;  // never destroyed: used until exit
  return *state;
}

// OK when an earlier set-up already gives what `options` asks for.
Status CheckSameSetUp(const InitState& state, const InitOptions& options) {
  if (options.rdma != state.rdma) {
    return FailedPrecondition(std::string("bx::Init: already initialised ") +
                              (state.rdma ? "with" : "without") + " RDMA");
  }
  if (options.rdma && !options.device.empty() && options.device != state.device) {
    return FailedPrecondition("bx::Init: already initialised on device " + state.device +
                              ", cannot use " + options.device);
  }
  return Status::Ok();
}

}  // namespace

Status Init(const InitOptions& options) {
  InitState& state = State();
  std::lock_guard lock(state.mu);
  if (state.done) return CheckSameSetUp(state, options);

  tcp::RegisterTcpTransport();
  rdma::RegisterRdmaTransport();

  // An rdma:// transport created before Init may have set bemalloc up on its device already.
  if (bemalloc::IsInitialized()) {
    verbs::Device* device = bemalloc::RegisteredDevice();
    state.rdma = device != nullptr;
    state.device = device != nullptr ? device->name() : "";
    BX_RETURN_IF_ERROR(CheckSameSetUp(state, options));
    state.done = true;
    return Status::Ok();
  }

  if (!options.rdma) {
    BX_RETURN_IF_ERROR(bemalloc::Init(std::make_unique<HostMemoryRegistrar>(), options.memory)
                           .WithContext("bx::Init"));
  } else {
    Result<verbs::Device> opened = verbs::Device::Open(options.device);
    if (!opened.ok()) {
      return opened.status().WithContext(
          "bx::Init: no RDMA device (InitOptions::rdma = false runs TCP only)");
    }
    // bemalloc's keys live in this device's protection domain: it stays open until exit.
    auto* device = new verbs::Device(std::move(opened).value());
    // On failure the device is left open: a half-made pool may still refer to it.
    BX_RETURN_IF_ERROR(bemalloc::Init(*device, options.memory).WithContext("bx::Init"));
    state.device = device->name();
  }
  state.rdma = options.rdma;
  state.done = true;
  return Status::Ok();
}

bool IsInitialized() {
  InitState& state = State();
  std::lock_guard lock(state.mu);
  return state.done;
}

std::string_view Version() {
  return BX_VERSION;
}

}  // namespace bx
