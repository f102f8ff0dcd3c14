#include "bx/init.h"

#include <memory>
#include <mutex>
#include <string>

#include "alloc/verbs_registrar.h"
#include "base/cpu_list.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "verbs/device_choice.h"
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
  std::string device;   // the device actually opened
  std::string request;  // what InitOptions::device asked for (a list may have chosen `device`)
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
  if (options.rdma && !options.device.empty() && options.device != state.device &&
      options.device != state.request) {
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
    // Init knows no transport's I/O threads: BX_IO_CPUS (one thread per CPU) stands for them.
    auto cpus = IoCpusFromEnvironment({});
    if (!cpus.ok()) return cpus.status().WithContext("bx::Init");
    const std::string_view request =
        options.device.empty() ? verbs::DeviceRequestFromEnvironment() : options.device;
    verbs::DeviceChoice choice;
    Result<verbs::Device> opened =
        verbs::OpenChosenDevice(request, *cpus, int(cpus->size()), &choice);
    if (!opened.ok()) {
      return opened.status().WithContext(
          "bx::Init: no RDMA device (InitOptions::rdma = false runs TCP only)");
    }
    // bemalloc's keys live in this device's protection domain: it stays open until exit.
    auto* device = new verbs::Device(std::move(opened).value());
    // On failure the device is left open: a half-made pool may still refer to it.
    BX_RETURN_IF_ERROR(bemalloc::Init(*device, options.memory).WithContext("bx::Init"));
    state.device = device->name();
    state.request = options.device;
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
