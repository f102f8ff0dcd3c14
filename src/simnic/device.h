// One simulated RNIC: its identity (name, GUID, GID), its port, and its tables of memory regions
// and queue pairs. Thread-safe: tables are guarded by shared mutexes (lookups by the hardware
// thread, changes by application threads), counters are atomics.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "simnic/device_profile.h"
#include "simnic/sim_objects.h"

namespace bx::simnic {

// What the hardware needs of an MR, copied out of the table so no lock is held while copying data.
struct MrView {
  uint8_t* host;  // host address of iova
  uint64_t iova;
  uint64_t length;
  int access;
  SimPd* protection_domain;
};

struct DeviceCounters {
  std::atomic<uint64_t> rnr_naks{0}, rnr_retry_exceeded{0}, packets_sent{0}, bytes_sent{0},
      packets_received{0}, bytes_received{0}, doorbells{0}, cq_overruns{0}, registered_bytes{0},
      memory_regions{0}, roce_v1_packets{0}, unmarked_packets{0}, datagrams_dropped{0};
};

class Device {
 public:
  Device(int index, uint32_t pid, const DeviceProfile& profile);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int index() const { return index_; }
  const std::string& name() const { return name_; }
  ibv_device* ibv() { return &ibv_device_; }
  // The fabric address (fe80::<pid>:<index>): what requests carry as their source.
  const ibv_gid& gid() const { return gid_; }
  const DeviceProfile& profile() const { return profile_; }
  // Ports 1..profile().ports exist; those below first_cabled_port are never up.
  bool PortExists(uint32_t port) const { return port >= 1 && port <= profile_.ports; }
  bool PortUp(uint32_t port) const {
    return PortExists(port) && port >= profile_.first_cabled_port && link_up();
  }
  // A port's GID table, fixed at creation (empty for a port that is not cabled).
  const std::vector<GidEntry>& gid_table(uint32_t port) const {
    static const std::vector<GidEntry> kNone;
    return port == profile_.first_cabled_port ? gid_table_ : kNone;
  }
  uint16_t lid() const { return lid_; }  // 0 unless the link layer is InfiniBand
  uint64_t guid_be() const { return guid_be_; }
  DeviceCounters& counters() { return counters_; }

  // Port state, changed by fault injection.
  bool link_up() const { return link_up_.load(std::memory_order_acquire); }
  void set_link_up(bool up) { link_up_.store(up, std::memory_order_release); }

  // Link model, read by the hardware thread when it stages a WQE.
  std::atomic<uint64_t> completion_delay_ns{0};
  std::atomic<double> link_gbps{0.0};
  std::atomic<uint64_t> link_latency_ns{0};
  uint64_t port_busy_until_ns = 0;  // hardware thread only

  // Memory regions. Keys are (slot << 8 | generation): a stale key never matches a reused slot.
  SimMr* RegisterMr(SimPd* pd, void* addr, size_t length, uint64_t iova, int access);
  // False (and nothing changes) while memory windows are bound to the MR, as ibv_dereg_mr says.
  bool DeregisterMr(SimMr* mr);
  // Changes an MR in place, keeping its keys (ibv_rereg_mr); false while windows are bound to it.
  bool ReregisterMr(SimMr* mr, SimPd* pd, void* addr, size_t length, uint64_t iova, int access);
  // An MR by its lkey or rkey; never a memory window.
  std::optional<MrView> FindMr(uint32_t key) const;

  // Remote access: the host address of [addr, addr + length) when `rkey` (an MR's or a bound
  // memory window's) lets `qp` access it with all of `access`; null otherwise.
  uint8_t* ResolveRemote(const SimQp* qp, uint32_t rkey, uint64_t addr, uint64_t length,
                         int access) const;

  // Memory windows, type 2B (memory_windows.cc). Their keys have bit 31 set, so they never match
  // an MR's; bits 30..8 are the slot and bits 7..0 the tag the consumer picks at each bind.
  SimMw* AllocMw(SimPd* pd);  // null when the table is full
  void DeallocMw(SimMw* mw);  // unbinds it first if bound
  // Hardware thread, in send-queue order: a bind or local invalidate posted on `qp`. Each returns
  // IBV_WC_SUCCESS or the status of the error completion.
  ibv_wc_status BindMw(const SimQp* qp, const SendWqe& wqe);
  ibv_wc_status InvalidateLocal(const SimQp* qp, uint32_t rkey);
  // Responder: SEND_WITH_INV. False unless `rkey` names a window bound to `qp`.
  bool InvalidateRemote(const SimQp* qp, uint32_t rkey);
  // A destroyed QP's windows become free, so a later QP at the same address cannot use them.
  void FreeWindowsOf(const SimQp* qp);
  // True when [addr, addr+length) lies within one MR of pd with all of `access`.
  bool IsRegistered(SimPd* pd, const void* addr, size_t length, int access) const;

  // Queue pairs by number.
  uint32_t AddQp(SimQp* qp);
  void RemoveQp(uint32_t qpn);
  SimQp* FindQp(uint32_t qpn) const;
  std::vector<SimQp*> AllQps() const;

  // Contexts opened on this device, for port async events.
  void AddContext(SimContext* c);
  void RemoveContext(SimContext* c);
  std::vector<SimContext*> Contexts() const;

 private:
  const int index_;
  std::string name_;
  ibv_device ibv_device_{};
  ibv_gid gid_{};
  const DeviceProfile& profile_;
  std::vector<GidEntry> gid_table_;
  uint16_t lid_ = 0;
  uint64_t guid_be_ = 0;
  std::atomic<bool> link_up_{true};
  DeviceCounters counters_;

  // The key table: MRs and memory windows, looked up by the hardware, changed by application
  // threads (register, allocate) and by the hardware (bind, invalidate).
  mutable std::shared_mutex mr_mu_;
  std::vector<SimMr*> mr_slots_;
  std::vector<uint8_t> mr_generation_;
  std::vector<uint32_t> mr_free_;
  std::vector<SimMw*> mw_slots_;
  std::vector<uint8_t> mw_generation_;
  std::vector<uint32_t> mw_free_;

  SimMw* FindMwLocked(uint32_t key) const;  // by slot only: the caller checks the tag
  void UnbindLocked(SimMw* mw);

  mutable std::shared_mutex qp_mu_;
  std::unordered_map<uint32_t, SimQp*> qps_;
  uint32_t next_qpn_ = 0x100;

  mutable std::mutex contexts_mu_;
  std::vector<SimContext*> contexts_;
};

// GIDs encode where a device lives: fe80::<pid>:<device index>. The fabric routes by them.
ibv_gid MakeGid(uint32_t pid, uint32_t index);
bool ParseGid(const ibv_gid& gid, uint32_t* pid, uint32_t* index);
bool GidEqual(const ibv_gid& a, const ibv_gid& b);

}  // namespace bx::simnic
