// The simnic's verbs objects. Each embeds the libibverbs struct it stands for as its first member
// (or, for the context, as rdma-core's verbs_context layout requires), so that a pointer handed to
// the application converts back with a static cast.
//
// Threads: application threads call the verbs; one "hardware" thread per process (fabric.cc,
// rc_*.cc) moves data and produces completions. Which fields each may touch is noted per field.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bx/simnic.h"

namespace bx::simnic {

class Device;
struct SimQp;

// Limits the simnic reports through ibv_query_device and enforces.
inline constexpr int kMaxQpWr = 16384;
inline constexpr int kMaxSge = 16;
inline constexpr int kMaxCqe = 1 << 20;
inline constexpr int kMaxInlineData = 256;  // the largest any device profile allows
inline constexpr int kMaxQp = 1 << 18;
inline constexpr int kMaxMr = 1 << 20;
inline constexpr int kMaxMw = 1 << 20;
// Bit 31 of a key marks a memory window: MR keys (slot < kMaxMr, shifted by 8) never set it.
inline constexpr uint32_t kMwKeyBit = 1u << 31;
inline constexpr uint64_t kMaxMrSize = 1ull << 40;
inline constexpr uint32_t kMaxMsgSize = 1u << 31;  // RC: 2 GB
// A UD receive buffer starts with room for the Global Route Header, filled when the datagram
// carried one (always on RoCE); the payload follows it, and byte_len counts both.
inline constexpr uint32_t kGrhBytes = 40;

inline constexpr uint32_t kContextMagic = 0xb5c0a7e1;

struct SimContext {
  uint32_t magic = kContextMagic;
  Device* device;
  int async_pipe[2];   // [0] is context.async_fd; the hardware thread writes AsyncRecord to [1]
  verbs_context vctx;  // must be last: verbs_get_ctx() finds it before the ibv_context
};

inline SimContext* ToSim(ibv_context* c) {
  return reinterpret_cast<SimContext*>(reinterpret_cast<char*>(c) - offsetof(SimContext, vctx) -
                                       offsetof(verbs_context, context));
}

// A protection domain, or a parent domain (which names a protection domain and a thread domain).
struct SimPd {
  ibv_pd pd;
  SimPd* protection_domain;  // itself for a plain PD; the underlying PD for a parent domain
  ibv_td* td = nullptr;      // the thread domain of a parent domain
  bool is_parent_domain = false;
  std::atomic<int> users{0};  // MRs, QPs and parent domains using it: dealloc fails while > 0
};
inline SimPd* ToSim(ibv_pd* p) {
  return reinterpret_cast<SimPd*>(p);
}
// The protection domain a PD or parent domain stands for.
inline SimPd* Protection(ibv_pd* p) {
  return ToSim(p)->protection_domain;
}

struct SimTd {
  ibv_td td;
  std::atomic<int> users{0};
};

struct SimMr {
  ibv_mr mr;
  SimPd* protection_domain;
  uint64_t iova;  // the address remote peers use; equals mr.addr unless registered with an iova
  int access;
  int bound_windows = 0;  // memory windows bound to it (under the device's key lock)
};

// A type 2B memory window. Allocated unbound ("free"); a bind work request executed by the
// hardware binds it to part of an MR and to the QP that posted the bind; a local invalidate, a
// SEND_WITH_INV from the peer or ibv_dealloc_mw frees it again. Every field after `mw` is guarded
// by the device's key lock; `mw` itself belongs to the application.
struct SimMw {
  ibv_mw mw;
  SimPd* protection_domain;
  uint32_t handle;  // the key it was allocated with: its slot and that slot's generation
  bool bound = false;
  uint32_t rkey = 0;  // the key a remote access must present while bound
  SimMr* mr = nullptr;
  uint64_t addr = 0;  // window start, in the MR's iova space
  uint64_t length = 0;
  int access = 0;  // IBV_ACCESS_REMOTE_* granted through the window
  bool zero_based = false;
  const SimQp* qp = nullptr;  // type 2B: only this QP may use the window
};

// An address handle (verbs_ah.cc): the address vector as given, and what it resolved to when it
// was created, so that the hardware routes a datagram without looking at GIDs or LIDs.
struct SimAh {
  ibv_ah ah;
  ibv_ah_attr attr;
  SimPd* protection_domain;
  ibv_gid peer_address;  // the destination's fabric address; all zero when nothing answers it
  ibv_gid source_gid;    // the GID the datagrams leave from (the AV's sgid_index)
};
inline SimAh* ToSim(ibv_ah* a) {
  return reinterpret_cast<SimAh*>(a);
}

// What a datagram's address vector puts on the wire, and the receiver's GRH and completion show.
struct DatagramRoute {
  ibv_gid source_gid;  // the GID it leaves from (the AV's sgid_index)
  ibv_gid dest_gid;    // as the AV names it
  bool global;         // a GRH is carried
  uint8_t sl;
  uint8_t traffic_class;
  uint8_t hop_limit;
  uint32_t flow_label;
};

// A UD send's destination, copied from its AH and work request at post time, as a NIC's WQE
// holds the address vector: the AH may be destroyed once the post returns.
struct UdAddress {
  ibv_gid peer_address;  // fabric address (SimAh::peer_address)
  DatagramRoute route;
  uint32_t remote_qpn;
  uint32_t qkey;  // the WR's, or the QP's own when the WR's has its top bit set
};

struct SimChannel {
  ibv_comp_channel channel;
  int write_fd;  // the hardware thread writes one ChannelEvent per event here
};

struct SimCq;
// One completion event in a channel's pipe. The serial tells a live CQ from a destroyed one
// (whose memory a new CQ may reuse): events of a destroyed CQ are dropped when read, as the
// kernel drops them at destroy.
struct ChannelEvent {
  SimCq* cq;
  uint64_t serial;
};

// One completion queue entry as the hardware writes it. `sequence` is the ownership bit of a real
// CQE: the entry at position i is valid once sequence == i + 1.
struct CqEntry {
  std::atomic<uint64_t> sequence{0};
  ibv_wc wc;
  SimQp* qp;              // null once the QP is destroyed (its CQEs are cleaned, as mlx5 does)
  uint64_t retire_up_to;  // the work-queue index this CQE frees slots up to (exclusive)
  bool is_send;
};

struct SimCq {
  // ibv_cq_ex begins with ibv_cq's fields: a CQ is either, as ibv_cq_ex_to_cq() assumes.
  union {
    ibv_cq cq;
    ibv_cq_ex cq_ex;
  };
  int capacity;
  std::vector<CqEntry> ring;
  // Producer (hardware thread only).
  uint64_t tail = 0;
  bool overrun = false;
  // Consumer (application threads; serialised by poll_lock).
  std::atomic<uint64_t> head{0};
  std::atomic_flag poll_lock = ATOMIC_FLAG_INIT;
  uint32_t empty_polls = 0;  // consecutive polls that found nothing (under poll_lock)
  // Extended polling (under poll_lock, held from a successful start_poll to end_poll): the CQE
  // the readers see, and the head past the CQEs consumed so far.
  const CqEntry* current = nullptr;
  uint64_t poll_head = 0;
  std::atomic<bool> polling{false};  // between a start_poll that found a CQE and its end_poll
  // Notification: req_notify_cq arms (1 = any, 2 = solicited only); the hardware disarms on event.
  std::atomic<int> armed{0};
  // Events ibv_get_cq_event returned and events acknowledged, for destroy_cq's wait. As in the
  // kernel, an event counts once the application has it, not when it is written.
  uint64_t serial = 0;  // see ChannelEvent
  std::mutex events_mu;
  std::condition_variable events_cv;
  uint64_t events_taken = 0;
  uint64_t events_acked = 0;
  std::atomic<bool> broken{false};  // set on overrun: polls fail from then on
  std::atomic<int> users{0};        // QPs using it
};
// The CQs whose channel events may still be returned (verbs_queues.cc).
uint64_t RegisterEventSource();
void RetireEventSource(uint64_t serial);
// Counts `event` as taken by the application and returns true, unless its CQ was destroyed.
bool TakeChannelEvent(const ChannelEvent& event);

inline SimCq* ToSim(ibv_cq* c) {
  return reinterpret_cast<SimCq*>(c);
}

// A send work request as the NIC holds it: copied at post time, data gathered at transmit time
// (except inline data, copied at post time as a real NIC's WQE holds it).
struct SendWqe {
  uint64_t wr_id;
  ibv_wr_opcode opcode;
  bool signaled;
  bool solicited;
  bool inlined;
  uint32_t imm_data;  // network byte order, as the application gave it; for LOCAL_INV and
                      // SEND_WITH_INV the rkey to invalidate (the two share a union in the WR)
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t length;  // total bytes
  int num_sge;
  ibv_sge sge[kMaxSge];
  uint8_t inline_data[kMaxInlineData];
  // IBV_WR_BIND_MW, copied at post time: the window (by its handle, so a window deallocated
  // meanwhile is not touched), its new rkey, and what the bind grants.
  uint32_t bind_mw_handle;
  uint32_t bind_rkey;
  UdAddress ud;      // IBV_QPT_UD sends
  bool bind_has_mr;  // a type 2 bind names an MR; without one it fails
  uint32_t bind_mr_lkey;
  uint64_t bind_addr;
  uint64_t bind_length;
  int bind_access;
  // Requester progress (hardware thread only).
  uint32_t psn;
  uint8_t rnr_retries_left;
  uint8_t retries_left;
  uint64_t ready_at_ns;  // link model: the time the WQE has crossed the wire
};

// Binds and local invalidates run in the requester's own NIC: no packet, no PSN, no data (their
// scatter list is ignored).
inline bool IsLocalOp(ibv_wr_opcode op) {
  return op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV;
}

struct RecvWqe {
  uint64_t wr_id;
  int num_sge;
  ibv_sge sge[kMaxSge];
};

// A shared receive queue: receives posted once and consumed, in the order posted, by whichever
// attached RC QP takes a SEND first. A WQE counts against max_wr from its post until its
// completion is polled, as in the provider drivers.
struct SimSrq {
  ibv_srq srq;
  SimPd* protection_domain;  // its WQEs' SGEs are checked against this PD
  SimContext* context;
  std::mutex mu;                  // posts (application) and takes (hardware thread)
  std::deque<RecvWqe> queue;      // posted, not yet taken (mu)
  uint32_t max_wr = 0;            // (mu)
  uint32_t max_sge = 0;           // (mu)
  uint32_t limit = 0;             // armed limit (IBV_SRQ_LIMIT); 0: disarmed (mu)
  std::atomic<uint32_t> used{0};  // posted and not yet retired by a poll
  std::atomic<int> users{0};      // attached QPs: destroy fails while > 0
};
inline SimSrq* ToSim(ibv_srq* s) {
  return reinterpret_cast<SimSrq*>(s);
}

// One work request of an ibv_wr_start() batch, built by the ibv_wr_* calls (verbs_qp_ex.cc) and
// checked and posted as a whole by ibv_wr_complete().
struct StagedWr {
  ibv_send_wr wr{};
  ibv_sge sge[kMaxSge]{};
  uint32_t inline_length = 0;
  uint8_t inline_data[kMaxInlineData];  // ibv_wr_set_inline_data copies here at once
};

struct SimQp {
  // ibv_qp_ex begins with an ibv_qp: a QP is either, as ibv_qp_to_qp_ex() assumes.
  union {
    ibv_qp qp;
    ibv_qp_ex qp_ex;
  };
  bool extended = false;  // created by ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
  // The batch between ibv_wr_start and ibv_wr_complete/abort (under send_mu, which the batch
  // holds): its work requests, and the first error a call in it met (reported by complete).
  std::vector<StagedWr> batch;
  int batch_error = 0;
  Device* device;
  SimPd* protection_domain;
  ibv_td* td;
  bool sq_sig_all;
  uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;

  // Attributes set by modify_qp (application, under the device's hardware lock).
  std::atomic<int> state{IBV_QPS_RESET};
  ibv_qp_attr attr{};
  // What RTR made of the address vector (application, under the hardware lock; read by the
  // hardware thread): the peer's fabric address (all zero when nothing on the fabric answers the
  // AV), and how packets are marked.
  ibv_gid peer_address{};
  bool roce_v1 = false;   // sent from a RoCE v1 source GID
  bool unmarked = false;  // sent on an Ethernet port with traffic class 0

  // Send queue ring. posted: application (under send_mu); hw_next/hw_done: hardware thread;
  // retired: the polling thread, when it consumes a CQE that frees slots.
  std::mutex send_mu;
  std::vector<SendWqe> sq;
  std::atomic<uint64_t> sq_posted{0};
  uint64_t sq_hw_next = 0;    // next WQE to transmit
  uint64_t sq_hw_done = 0;    // WQEs completed by the hardware
  uint64_t sq_hw_staged = 0;  // WQEs given a PSN and a wire time
  uint32_t next_send_psn = 0;
  std::atomic<uint64_t> sq_retired{0};

  // With an SRQ, receives come from it and the QP's own receive queue is unused.
  SimSrq* srq = nullptr;
  bool last_wqe_reported = false;  // IBV_EVENT_QP_LAST_WQE_REACHED, once per error (hardware)

  // Receive queue ring, with the same roles.
  std::mutex recv_mu;
  std::vector<RecvWqe> rq;
  std::atomic<uint64_t> rq_posted{0};
  uint64_t rq_consumed = 0;  // hardware thread (responder)
  std::atomic<uint64_t> rq_retired{0};

  // Responder state (hardware thread only).
  uint32_t expected_psn = 0;

  // Scheduling (hardware thread; `queued` also set by doorbells).
  std::atomic<bool> queued{false};
  uint64_t wake_at_ns = 0;  // nonzero while waiting on a timer
  bool destroyed = false;

  // Moves the QP to the error state (under the hardware lock, or on the hardware thread). True
  // when it was not in error before, so the caller reports the transition once.
  bool SetErrorState() {
    if (state.exchange(IBV_QPS_ERR, std::memory_order_seq_cst) == IBV_QPS_ERR) return false;
    qp.state = IBV_QPS_ERR;
    return true;
  }
};
inline SimQp* ToSim(ibv_qp* q) {
  return reinterpret_cast<SimQp*>(q);
}
inline SimQp* ToSim(ibv_qp_ex* q) {
  return reinterpret_cast<SimQp*>(q);
}

// What the hardware thread writes to a context's async pipe; ibv_get_async_event reads it.
struct AsyncRecord {
  ibv_event_type type;
  void* object;  // ibv_qp*, ibv_cq*, or port number cast to a pointer
};

}  // namespace bx::simnic
