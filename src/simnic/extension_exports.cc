// The simnic extension API (include/bx/simnic.h): fault injection, counters, link models.
#include <cerrno>

#include "bx/simnic.h"
#include "simnic/device_sysfs.h"
#include "simnic/fabric.h"
#include "simnic/verbs_internal.h"

using namespace bx::simnic;

namespace {

Device* DeviceOf(ibv_context* context) {
  return IsSimContext(context) ? ToSim(context)->device : nullptr;
}

}  // namespace

extern "C" {

int bxsim_query_counters(ibv_context* context, bxsim_device_counters* out) {
  Device* dev = DeviceOf(context);
  if (dev == nullptr || out == nullptr) return EINVAL;
  DeviceCounters& c = dev->counters();
  out->rnr_naks = c.rnr_naks.load();
  out->rnr_retry_exceeded = c.rnr_retry_exceeded.load();
  out->packets_sent = c.packets_sent.load();
  out->bytes_sent = c.bytes_sent.load();
  out->packets_received = c.packets_received.load();
  out->bytes_received = c.bytes_received.load();
  out->doorbells = c.doorbells.load();
  out->cq_overruns = c.cq_overruns.load();
  out->registered_bytes = c.registered_bytes.load();
  out->memory_regions = c.memory_regions.load();
  out->roce_v1_packets = c.roce_v1_packets.load();
  out->unmarked_packets = c.unmarked_packets.load();
  out->datagrams_dropped = c.datagrams_dropped.load();
  return 0;
}

uint64_t bxsim_hardware_cpu_ns(void) {
  return Fabric::Get().HardwareCpuNs();
}

int bxsim_force_qp_error(ibv_qp* qp) {
  if (qp == nullptr || !IsSimContext(qp->context)) return EINVAL;
  Fabric& fabric = Fabric::Get();
  Fabric::ControlLock lock(fabric);
  SimQp* sim = ToSim(qp);
  fabric.FailQp(sim, true);
  // The connected peer, when it lives in this process, fails with it; a peer in another process
  // finds out through its transport retries, as across a real fabric.
  uint32_t pid = 0, index = 0;
  if (ParseGid(sim->peer_address, &pid, &index) && pid == fabric.pid()) {
    Device* peer_dev = fabric.device(index);
    SimQp* peer = peer_dev ? peer_dev->FindQp(sim->attr.dest_qp_num) : nullptr;
    if (peer != nullptr && !peer->destroyed && peer->attr.dest_qp_num == qp->qp_num)
      fabric.FailQp(peer, true);
  }
  return 0;
}

int bxsim_set_link(ibv_context* context, int up) {
  Device* dev = DeviceOf(context);
  if (dev == nullptr) return EINVAL;
  Fabric& fabric = Fabric::Get();
  Fabric::ControlLock lock(fabric);
  bool was_up = dev->link_up();
  dev->set_link_up(up != 0);
  UpdateSysfsPortState(dev);
  if (was_up != dev->link_up())
    Fabric::PostAsyncEvent(dev, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR,
                           reinterpret_cast<void*>(uintptr_t(1)));
  return 0;
}

int bxsim_vanish(ibv_context* context) {
  Device* dev = DeviceOf(context);
  if (dev == nullptr) return EINVAL;
  Fabric& fabric = Fabric::Get();
  Fabric::ControlLock lock(fabric);
  dev->set_link_up(false);
  UpdateSysfsPortState(dev);
  for (SimQp* qp : dev->AllQps()) {
    if (qp->destroyed) continue;
    qp->SetErrorState();  // silently: a dead host raises no event
    fabric.Enqueue(qp);
  }
  return 0;
}

int bxsim_set_completion_delay(ibv_context* context, uint64_t delay_ns) {
  Device* dev = DeviceOf(context);
  if (dev == nullptr) return EINVAL;
  dev->completion_delay_ns.store(delay_ns);
  return 0;
}

int bxsim_set_link_model(ibv_context* context, double gbps, uint64_t latency_ns) {
  Device* dev = DeviceOf(context);
  if (dev == nullptr || gbps < 0) return EINVAL;
  dev->link_gbps.store(gbps);
  dev->link_latency_ns.store(latency_ns);
  return 0;
}

int bxsim_is_registered(ibv_pd* pd, const void* addr, size_t length, int access) {
  if (pd == nullptr || !IsSimContext(pd->context)) return 0;
  return ToSim(pd->context)->device->IsRegistered(Protection(pd), addr, length, access) ? 1 : 0;
}

}  // extern "C"
