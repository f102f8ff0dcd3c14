// The verbs loader: the one door to libibverbs in bexpress.
//
// Nothing outside src/verbs/ includes <infiniband/verbs.h> or links libibverbs; code calls the
// verbs through a Library, which is either the system libibverbs (a real RNIC) or the simnic
// (libbx_simnic.so, a software RNIC exporting the same ABI), chosen at run time. Both are opened
// with dlopen(RTLD_LOCAL) so the two never mix, and each entry point is resolved with the symbol
// version rdma-core gave it, so the same binary and code path runs on hardware and in tests.
//
// Selection (BX_VERBS=auto|system|sim, default auto):
//   system: dlopen("libibverbs.so.1").
//   sim:    $BX_SIMNIC_LIB if set; else <dir of /proc/self/exe>/../lib/libbx_simnic.so; else the
//           build tree's libbx_simnic.so; else "libbx_simnic.so" from the loader's search path.
//   auto:   sim when BX_DEVICE names a bxsim* device; else system when it loads and
//           ibv_get_device_list finds at least one device; else sim.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bx/devices.h"
#include "bx/simnic.h"
#include "bx/status.h"

namespace bx::verbs {

enum class Backend { kSystem, kSim };
std::string_view BackendName(Backend backend);  // "system" or "sim"

// Device names with this prefix belong to the simnic.
inline constexpr std::string_view kSimDevicePrefix = "bxsim";

// A loaded verbs library: a table of libibverbs entry points. Immutable once loaded, so any
// thread may call it; the verbs themselves are as thread-safe as libibverbs documents.
class Library {
 public:
  // The process-wide library chosen by BX_VERBS and BX_DEVICE (see the file comment). Loaded
  // once (thread-safe), never unloaded. The error names each path tried and why it failed.
  static Result<Library*> Get();

  // The process-wide library of one backend, whatever BX_VERBS says (a singleton per backend).
  static Result<Library*> ForBackend(Backend backend);

  // The library that serves the device `name`: in auto mode a bxsim* name selects the simnic,
  // any other name (or none) gives Get().
  static Result<Library*> ForDevice(std::string_view name);

  // Loads a fresh, non-singleton library by the selection rules for `mode` ("auto", "system",
  // "sim"; empty means auto) and `device_hint` (a BX_DEVICE value). Reads BX_SIMNIC_LIB from the
  // environment. For tests of the selection logic and for tools that want both backends.
  static Result<std::unique_ptr<Library>> Load(std::string_view mode,
                                               std::string_view device_hint = {});

  // The shared object stays mapped after the Library is destroyed: verbs objects and threads
  // created through it may outlive this table.
  ~Library() = default;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  Backend backend() const { return backend_; }
  bool is_sim() const { return backend_ == Backend::kSim; }
  const std::string& path() const { return path_; }  // the .so actually loaded

  // Entry points with their libibverbs signatures. Required ones are never null; the ones marked
  // optional are null when the library does not export them.
  decltype(&::ibv_get_device_list) get_device_list = nullptr;
  decltype(&::ibv_free_device_list) free_device_list = nullptr;
  decltype(&::ibv_get_device_name) get_device_name = nullptr;
  decltype(&::ibv_get_device_guid) get_device_guid = nullptr;  // optional
  decltype(&::ibv_open_device) open_device = nullptr;
  decltype(&::ibv_close_device) close_device = nullptr;
  decltype(&::ibv_query_device) query_device = nullptr;
  decltype(&::ibv_query_gid) query_gid = nullptr;
  decltype(&::_ibv_query_gid_ex) query_gid_ex = nullptr;  // optional (IBVERBS_1.11)
  decltype(&::ibv_alloc_pd) alloc_pd = nullptr;
  decltype(&::ibv_dealloc_pd) dealloc_pd = nullptr;
  decltype(&::ibv_reg_mr) reg_mr = nullptr;
  decltype(&::ibv_reg_mr_iova2) reg_mr_iova2 = nullptr;  // optional (IBVERBS_1.8)
  decltype(&::ibv_dereg_mr) dereg_mr = nullptr;
  decltype(&::ibv_create_comp_channel) create_comp_channel = nullptr;
  decltype(&::ibv_destroy_comp_channel) destroy_comp_channel = nullptr;
  decltype(&::ibv_create_cq) create_cq = nullptr;
  decltype(&::ibv_destroy_cq) destroy_cq = nullptr;
  decltype(&::ibv_get_cq_event) get_cq_event = nullptr;
  decltype(&::ibv_ack_cq_events) ack_cq_events = nullptr;
  decltype(&::ibv_create_qp) create_qp = nullptr;
  decltype(&::ibv_modify_qp) modify_qp = nullptr;
  decltype(&::ibv_query_qp) query_qp = nullptr;  // optional
  decltype(&::ibv_destroy_qp) destroy_qp = nullptr;
  decltype(&::ibv_get_async_event) get_async_event = nullptr;  // optional
  decltype(&::ibv_ack_async_event) ack_async_event = nullptr;  // optional
  // Never null: when the library lacks them, local versions with fixed texts stand in.
  decltype(&::ibv_wc_status_str) wc_status_str = nullptr;
  decltype(&::ibv_port_state_str) port_state_str = nullptr;
  decltype(&::ibv_event_type_str) event_type_str = nullptr;
  // The exported ibv_query_port, which takes the old, shorter port attributes; call QueryPort.
  decltype(&::ibv_query_port) query_port_compat = nullptr;

  // ibv_query_port as <infiniband/verbs.h> does it: the extended context op when the provider
  // has one, else the exported compat function on a zeroed ibv_port_attr.
  int QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr) const;

  // ibv_reg_mr as the header macro does it: ibv_reg_mr_iova2 when `access` has optional flags
  // (IBV_ACCESS_OPTIONAL_RANGE) and the library has it, else ibv_reg_mr.
  ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, unsigned int access) const;

  // The inline verbs: they dispatch through the context ops exactly as on hardware, so they work
  // unchanged on either backend and cost one indirect call.
  static int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    return ::ibv_post_send(qp, wr, bad_wr);
  }
  static int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    return ::ibv_post_recv(qp, wr, bad_wr);
  }
  static int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
    return ::ibv_poll_cq(cq, num_entries, wc);
  }
  static int ReqNotifyCq(ibv_cq* cq, int solicited_only) {
    return ::ibv_req_notify_cq(cq, solicited_only);
  }
  static ibv_td* AllocTd(ibv_context* context, ibv_td_init_attr* init_attr) {
    return ::ibv_alloc_td(context, init_attr);
  }
  static int DeallocTd(ibv_td* td) { return ::ibv_dealloc_td(td); }
  static ibv_pd* AllocParentDomain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
    return ::ibv_alloc_parent_domain(context, attr);
  }
  // Memory windows: inline in the header too (context ops), so nothing to resolve. A type 2
  // window is bound and invalidated by work requests (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV) through
  // PostSend; AllocMw fails with EOPNOTSUPP where the provider has no windows.
  static ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type) { return ::ibv_alloc_mw(pd, type); }
  static int DeallocMw(ibv_mw* mw) { return ::ibv_dealloc_mw(mw); }

  // The simnic extension API (include/bx/simnic.h). Every member is null on the system backend,
  // and null on the sim backend for a function this simnic build does not export.
  struct SimControl {
    decltype(&::bxsim_query_counters) query_counters = nullptr;
    decltype(&::bxsim_hardware_cpu_ns) hardware_cpu_ns = nullptr;
    decltype(&::bxsim_force_qp_error) force_qp_error = nullptr;
    decltype(&::bxsim_set_link) set_link = nullptr;
    decltype(&::bxsim_vanish) vanish = nullptr;
    decltype(&::bxsim_set_completion_delay) set_completion_delay = nullptr;
    decltype(&::bxsim_set_link_model) set_link_model = nullptr;
    decltype(&::bxsim_is_registered) is_registered = nullptr;
  };
  const SimControl& sim() const { return sim_; }

 private:
  Library(Backend backend, std::string path) : backend_(backend), path_(std::move(path)) {}
  // dlopens one backend and resolves its entry points.
  static Result<std::unique_ptr<Library>> Open(Backend backend);
  static Result<std::unique_ptr<Library>> OpenAt(Backend backend, const std::string& path);
  Status Resolve(void* handle);

  Backend backend_;
  std::string path_;
  SimControl sim_;
};

// An opened device with one protection domain. Move-only; deallocates the PD and closes the
// device on destruction. Thread-compatible: const methods may run concurrently, and the
// context and PD may be used from any thread as libibverbs allows.
class Device {
 public:
  // Opens the device `name` (empty: $BX_DEVICE when set, else the first device) through
  // Library::ForDevice(name). The error lists the devices that exist.
  static Result<Device> Open(std::string_view name = {});
  // Same, through a given library.
  static Result<Device> Open(Library& lib, std::string_view name);

  Device(Device&& other) noexcept;
  Device& operator=(Device&& other) noexcept;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();

  ibv_context* context() const { return context_; }
  ibv_pd* pd() const { return pd_; }
  const std::string& name() const { return name_; }
  const ibv_device_attr& attr() const { return attr_; }
  // Queried on each call (port state changes); all zero (IBV_PORT_NOP) when the query fails.
  ibv_port_attr port(uint8_t port_num = 1) const;
  // Queried on each call; all zero when the query fails.
  union ibv_gid gid(uint8_t port_num = 1, int index = 0) const;
  Library& lib() const { return *lib_; }

 private:
  Device() = default;
  void Close();

  Library* lib_ = nullptr;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::string name_;
  ibv_device_attr attr_{};
};

// What `bx devices` shows about one device: the public type (bx::ListDevices returns it).
using DeviceInfo = bx::DeviceInfo;

// Every device of Library::Get() (or of `lib`). An error when there are none: Unavailable,
// naming why ibv_get_device_list found nothing (ENOSYS on a kernel without RDMA).
Result<std::vector<DeviceInfo>> ListDevices();
// `port_device`'s entry describes `port` (a port a device request named) rather than its first
// active port, when `port` is not 0.
Result<std::vector<DeviceInfo>> ListDevices(Library& lib, std::string_view port_device = {},
                                            uint8_t port = 0);

// "fe80:0000:0000:0000:0011:2233:4455:6677", as ibv_devinfo prints GIDs.
std::string FormatGid(const union ibv_gid& gid);

}  // namespace bx::verbs
