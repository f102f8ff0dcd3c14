// simnic extension API: what a software RNIC can do that hardware cannot (fault injection,
// counters, link models). Exported by libbx_simnic.so next to the libibverbs functions it
// implements. Code above src/verbs/ reaches these only through the verbs loader
// (bx::verbs::SimControl), which finds them with dlsym and reports their absence on hardware.
//
// All functions are thread-safe and return 0 on success or an errno value on failure (EINVAL
// when the object does not belong to the simnic).
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_context;
struct ibv_qp;
struct ibv_pd;

struct bxsim_device_counters {
  uint64_t rnr_naks;            // RNR NAKs this device answered as a responder
  uint64_t rnr_retry_exceeded;  // requester WRs that failed with IBV_WC_RNR_RETRY_EXC_ERR
  uint64_t packets_sent;        // WRs transmitted as requester (one per send/write/read WR)
  uint64_t bytes_sent;
  uint64_t packets_received;
  uint64_t bytes_received;
  uint64_t doorbells;  // post_send / post_recv calls that reached the device
  uint64_t cq_overruns;
  uint64_t registered_bytes;  // bytes currently covered by MRs on this device
  uint64_t memory_regions;    // MRs currently registered on this device
  // Of packets_sent, those a RoCE fabric would not carry in its lossless class: sent from a
  // RoCE v1 source GID (not routable past the subnet), or with traffic class 0 (the default,
  // usually lossy, class). Always 0 on an InfiniBand port.
  uint64_t roce_v1_packets;
  uint64_t unmarked_packets;
  // UD datagrams this device dropped as a receiver: no such UD QP, a wrong Q_Key, or no receive
  // posted (UD is unreliable: the sender is not told).
  uint64_t datagrams_dropped;
};

// Reads the device's counters.
int bxsim_query_counters(struct ibv_context* context, struct bxsim_device_counters* out);

// CPU time (ns) consumed so far by the simnic's own "hardware" threads in this process. Host CPU
// per message = process CPU time minus this.
uint64_t bxsim_hardware_cpu_ns(void);

// Moves the QP to the error state as a fatal hardware error would: outstanding work is flushed
// with IBV_WC_WR_FLUSH_ERR and the connected peer QP fails too.
int bxsim_force_qp_error(struct ibv_qp* qp);

// Takes the device's port link down (up = 0) or up again. While down, the port reports
// IBV_PORT_DOWN and requester work to or from it fails with IBV_WC_RETRY_EXC_ERR after the
// QP's transport retries.
int bxsim_set_link(struct ibv_context* context, int up);

// Makes the device vanish from the fabric as if its host died: every QP on it goes to error
// without telling peers (no async event), and its link goes down; peers find out through their
// transport retries (IBV_WC_RETRY_EXC_ERR). bxsim_set_link(context, 1) brings the device back
// (its old QPs stay in error), as a rebooted host would come back.
int bxsim_vanish(struct ibv_context* context);

// Adds a fixed delay to every completion the device generates (both requester and responder).
int bxsim_set_completion_delay(struct ibv_context* context, uint64_t delay_ns);

// Models the port as a link of `gbps` (0 = unlimited) with one-way `latency_ns`.
int bxsim_set_link_model(struct ibv_context* context, double gbps, uint64_t latency_ns);

// Returns 1 when [addr, addr+length) lies inside one MR of `pd` whose access flags include all of
// `access`, 0 otherwise. Lets tests check that an allocator never hands out unregistered memory.
int bxsim_is_registered(struct ibv_pd* pd, const void* addr, size_t length, int access);

#ifdef __cplusplus
}
#endif
