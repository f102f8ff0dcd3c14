// Library: finding, opening and resolving a verbs library. See verbs.h for the rules.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>
#include <vector>

#include "verbs/device_list.h"
#include "verbs/simnic_paths.h"
#include "verbs/verbs.h"

namespace bx::verbs {
namespace {

constexpr const char* kSystemLibrary = "libibverbs.so.1";
constexpr const char* kSimLibrary = "libbx_simnic.so";

std::string_view Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::string DlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown dlopen error";
}

// The simnic candidates, best first. An explicit $BX_SIMNIC_LIB is the only candidate: falling
// back silently would test a different simnic than the one asked for.
std::vector<std::string> SimLibraryCandidates() {
  if (std::string_view explicit_path = Env("BX_SIMNIC_LIB"); !explicit_path.empty()) {
    return {std::string(explicit_path)};
  }
  std::vector<std::string> candidates;
  std::error_code error;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error)
    candidates.push_back((exe.parent_path() / ".." / "lib" / kSimLibrary).lexically_normal());
  // Next to the library this code is in (libbexpress.so), wherever it was installed or copied.
  if (Dl_info self; dladdr(reinterpret_cast<void*>(&SimLibraryCandidates), &self) != 0 &&
                    self.dli_fname != nullptr) {
    candidates.push_back(std::filesystem::path(self.dli_fname).parent_path() / kSimLibrary);
  }
  for (std::string& path : BuiltInSimnicPaths()) candidates.push_back(std::move(path));
  candidates.push_back(kSimLibrary);
  return candidates;
}

// Stand-ins for the string functions, so callers never check them for null.
const char* FallbackWcStatusStr(ibv_wc_status) {
  return "unknown work completion status";
}
const char* FallbackPortStateStr(ibv_port_state) {
  return "unknown port state";
}
const char* FallbackEventTypeStr(ibv_event_type) {
  return "unknown async event";
}

// One entry point to resolve: rdma-core versions every symbol, and old binaries must get the
// version they were built against, so look up the version that introduced the current ABI
// first and fall back to the default version (a provider that does not version its symbols).
struct Symbol {
  const char* name;
  const char* version;
  void** slot;
  bool required;
};

template <typename Fn>
void** Slot(Fn* member) {
  return reinterpret_cast<void**>(member);
}

void* LookUp(void* handle, const char* name, const char* version) {
  void* address = version != nullptr ? dlvsym(handle, name, version) : nullptr;
  return address != nullptr ? address : dlsym(handle, name);
}

enum class Mode { kAuto, kSystem, kSim };

Result<Mode> ParseMode(std::string_view mode) {
  if (mode.empty() || mode == "auto") return Mode::kAuto;
  if (mode == "system") return Mode::kSystem;
  if (mode == "sim") return Mode::kSim;
  return InvalidArgument("BX_VERBS=" + std::string(mode) + ": expected auto, system or sim");
}

// The BX_VERBS value that Get() and ForDevice() obey; an invalid value is reported by Get().
Mode ProcessMode() {
  Result<Mode> mode = ParseMode(Env("BX_VERBS"));
  return mode.ok() ? mode.value() : Mode::kAuto;
}

bool IsSimDeviceName(std::string_view name) {
  return name.starts_with(kSimDevicePrefix);
}

}  // namespace

std::string_view BackendName(Backend backend) {
  return backend == Backend::kSim ? "sim" : "system";
}

Status Library::Resolve(void* handle) {
  const Symbol symbols[] = {
      {"ibv_get_device_list", "IBVERBS_1.1", Slot(&get_device_list), true},
      {"ibv_free_device_list", "IBVERBS_1.1", Slot(&free_device_list), true},
      {"ibv_get_device_name", "IBVERBS_1.1", Slot(&get_device_name), true},
      {"ibv_get_device_guid", "IBVERBS_1.1", Slot(&get_device_guid), false},
      {"ibv_open_device", "IBVERBS_1.1", Slot(&open_device), true},
      {"ibv_close_device", "IBVERBS_1.1", Slot(&close_device), true},
      {"ibv_query_device", "IBVERBS_1.1", Slot(&query_device), true},
      {"ibv_query_port", "IBVERBS_1.1", Slot(&query_port_compat), true},
      {"ibv_query_gid", "IBVERBS_1.1", Slot(&query_gid), true},
      {"_ibv_query_gid_ex", "IBVERBS_1.11", Slot(&query_gid_ex), false},
      {"ibv_alloc_pd", "IBVERBS_1.1", Slot(&alloc_pd), true},
      {"ibv_dealloc_pd", "IBVERBS_1.1", Slot(&dealloc_pd), true},
      {"ibv_reg_mr", "IBVERBS_1.1", Slot(&reg_mr), true},
      {"ibv_reg_mr_iova2", "IBVERBS_1.8", Slot(&reg_mr_iova2), false},
      {"ibv_dereg_mr", "IBVERBS_1.1", Slot(&dereg_mr), true},
      // The completion channel functions never changed ABI, so they only exist as 1.0.
      {"ibv_create_comp_channel", "IBVERBS_1.0", Slot(&create_comp_channel), true},
      {"ibv_destroy_comp_channel", "IBVERBS_1.0", Slot(&destroy_comp_channel), true},
      {"ibv_create_cq", "IBVERBS_1.1", Slot(&create_cq), true},
      {"ibv_destroy_cq", "IBVERBS_1.1", Slot(&destroy_cq), true},
      {"ibv_get_cq_event", "IBVERBS_1.1", Slot(&get_cq_event), true},
      {"ibv_ack_cq_events", "IBVERBS_1.1", Slot(&ack_cq_events), true},
      {"ibv_create_qp", "IBVERBS_1.1", Slot(&create_qp), true},
      {"ibv_modify_qp", "IBVERBS_1.1", Slot(&modify_qp), true},
      {"ibv_query_qp", "IBVERBS_1.1", Slot(&query_qp), false},
      {"ibv_destroy_qp", "IBVERBS_1.1", Slot(&destroy_qp), true},
      {"ibv_get_async_event", "IBVERBS_1.1", Slot(&get_async_event), false},
      {"ibv_ack_async_event", "IBVERBS_1.1", Slot(&ack_async_event), false},
      {"ibv_wc_status_str", "IBVERBS_1.1", Slot(&wc_status_str), false},
      {"ibv_port_state_str", "IBVERBS_1.1", Slot(&port_state_str), false},
      {"ibv_event_type_str", "IBVERBS_1.1", Slot(&event_type_str), false},
  };
  std::string missing;
  for (const Symbol& symbol : symbols) {
    *symbol.slot = LookUp(handle, symbol.name, symbol.version);
    if (*symbol.slot == nullptr && symbol.required) {
      missing += missing.empty() ? "" : ", ";
      missing += symbol.name;
    }
  }
  if (!missing.empty()) return NotFound(path_ + " does not export " + missing);
  if (wc_status_str == nullptr) wc_status_str = FallbackWcStatusStr;
  if (port_state_str == nullptr) port_state_str = FallbackPortStateStr;
  if (event_type_str == nullptr) event_type_str = FallbackEventTypeStr;

  if (backend_ == Backend::kSim) {
    const Symbol extensions[] = {
        {"bxsim_query_counters", nullptr, Slot(&sim_.query_counters), false},
        {"bxsim_hardware_cpu_ns", nullptr, Slot(&sim_.hardware_cpu_ns), false},
        {"bxsim_force_qp_error", nullptr, Slot(&sim_.force_qp_error), false},
        {"bxsim_set_link", nullptr, Slot(&sim_.set_link), false},
        {"bxsim_vanish", nullptr, Slot(&sim_.vanish), false},
        {"bxsim_set_completion_delay", nullptr, Slot(&sim_.set_completion_delay), false},
        {"bxsim_set_link_model", nullptr, Slot(&sim_.set_link_model), false},
        {"bxsim_is_registered", nullptr, Slot(&sim_.is_registered), false},
    };
    for (const Symbol& symbol : extensions) *symbol.slot = dlsym(handle, symbol.name);
  }
  return Status::Ok();
}

Result<std::unique_ptr<Library>> Library::OpenAt(Backend backend, const std::string& path) {
  // RTLD_LOCAL: the system libibverbs and the simnic export the same names; neither may satisfy
  // the other's (or a later library's) undefined symbols.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    // dlerror() usually starts with the path already; name it only when it does not.
    std::string error = DlError();
    if (error.find(path) == std::string::npos) error = path + ": " + error;
    return Unavailable("dlopen " + error);
  }
  std::unique_ptr<Library> library(new Library(backend, path));
  // Report the file the dynamic loader actually chose when it searched for a bare name.
  if (Dl_info info;
      dladdr(dlsym(handle, "ibv_get_device_list"), &info) != 0 && info.dli_fname != nullptr) {
    library->path_ = info.dli_fname;
  }
  // The handle is never closed: provider threads and verbs objects may outlive the table.
  BX_RETURN_IF_ERROR(library->Resolve(handle));
  return library;
}

Result<std::unique_ptr<Library>> Library::Open(Backend backend) {
  if (backend == Backend::kSystem) return OpenAt(backend, kSystemLibrary);
  std::string tried;
  for (const std::string& candidate : SimLibraryCandidates()) {
    Result<std::unique_ptr<Library>> library = OpenAt(backend, candidate);
    if (library.ok()) return library;
    tried += tried.empty() ? "" : "; ";
    tried += library.status().message();
  }
  return Unavailable("simnic not loadable: " + tried);
}

Result<std::unique_ptr<Library>> Library::Load(std::string_view mode,
                                               std::string_view device_hint) {
  BX_ASSIGN_OR_RETURN(Mode parsed, ParseMode(mode));
  switch (parsed) {
    case Mode::kSystem:
      return Open(Backend::kSystem);
    case Mode::kSim:
      return Open(Backend::kSim);
    case Mode::kAuto:
      break;
  }
  if (IsSimDeviceName(device_hint)) {
    Result<std::unique_ptr<Library>> sim = Open(Backend::kSim);
    if (!sim.ok()) return sim.status().WithContext("BX_DEVICE=" + std::string(device_hint));
    return sim;
  }
  std::string system_problem;
  Result<std::unique_ptr<Library>> system = Open(Backend::kSystem);
  if (system.ok()) {
    Result<DeviceList> devices = DeviceList::Get(**system);
    if (devices.ok()) return system;
    system_problem = devices.status().message();
  } else {
    system_problem = system.status().message();
  }
  Result<std::unique_ptr<Library>> sim = Open(Backend::kSim);
  if (sim.ok()) return sim;
  return Unavailable("no usable verbs library (BX_VERBS=auto): system: " + system_problem +
                     "; sim: " + sim.status().message());
}

Result<Library*> Library::Get() {
  // A function-local static: initialised once, thread-safe, never destroyed.
  static const Result<Library*>* const process_library = [] {
    std::string_view mode = Env("BX_VERBS");
    std::string_view device = Env("BX_DEVICE");
    if (Result<Mode> parsed = ParseMode(mode); !parsed.ok()) {
      return new Result<Library*>(parsed.status());
    }
    // Share the per-backend singleton when the choice is explicit or forced by the device name,
    // so Get() and ForBackend() hand out the same table.
    if (mode == "system") return new Result<Library*>(ForBackend(Backend::kSystem));
    if (mode == "sim" || IsSimDeviceName(device)) {
      return new Result<Library*>(ForBackend(Backend::kSim));
    }
    Result<std::unique_ptr<Library>> loaded = Load(mode, device);
    if (!loaded.ok()) return new Result<Library*>(loaded.status());
    return new Result<Library*>(ForBackend(loaded.value()->backend()));
  }();
  return *process_library;
}

Result<Library*> Library::ForBackend(Backend backend) {
  static std::mutex mutex;
  static Library* loaded[2] = {nullptr, nullptr};
  std::lock_guard lock(mutex);
  Library*& slot = loaded[backend == Backend::kSim ? 1 : 0];
  if (slot == nullptr) {
    BX_ASSIGN_OR_RETURN(std::unique_ptr<Library> library, Open(backend));
    slot = library.release();  // never destroyed: see Get()
  }
  return slot;
}

Result<Library*> Library::ForDevice(std::string_view name) {
  if (ProcessMode() == Mode::kAuto && IsSimDeviceName(name)) return ForBackend(Backend::kSim);
  return Get();
}

int Library::QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr) const {
  if (verbs_context* extended = verbs_get_ctx_op(context, query_port); extended != nullptr) {
    return extended->query_port(context, port_num, port_attr, sizeof(*port_attr));
  }
  // The compat ABI fills only the leading fields of ibv_port_attr; the rest must read as zero.
  std::memset(port_attr, 0, sizeof(*port_attr));
  return query_port_compat(context, port_num, reinterpret_cast<_compat_ibv_port_attr*>(port_attr));
}

ibv_mr* Library::RegMr(ibv_pd* pd, void* addr, size_t length, unsigned int access) const {
  if ((access & IBV_ACCESS_OPTIONAL_RANGE) != 0 && reg_mr_iova2 != nullptr) {
    return reg_mr_iova2(pd, addr, length, reinterpret_cast<uintptr_t>(addr), access);
  }
  // Without iova2 the optional flags are hints a device may ignore; drop them as libibverbs does
  // on kernels that do not support them.
  return reg_mr(pd, addr, length, static_cast<int>(access & ~IBV_ACCESS_OPTIONAL_RANGE));
}

}  // namespace bx::verbs
