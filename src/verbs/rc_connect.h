// Reliable-connected queue pairs: creating one with its completion queue, and walking it
// through RESET -> INIT -> RTR -> RTS towards a known peer (as rc_pingpong does, with a GRH so it
// works on RoCE and on the simnic alike). Used by the self-check, the simnic conformance tests
// and the engine. The peer's QP number and GID come from whatever exchange the caller runs.
#pragma once

#include <cstdint>
#include <optional>

#include "verbs/verbs.h"

namespace bx::verbs {

// Sizes for CreateRcQueuePair.
struct QueuePairAttrs {
  uint32_t max_send_wr = 128;
  uint32_t max_recv_wr = 128;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
  // Entries of the CQ created when the caller does not pass one; it serves both queues, so it
  // must hold a completion for every send and receive that can be outstanding.
  int cq_entries = 256;
  // Every send WR completes with a CQE (true), or only those with IBV_SEND_SIGNALED (false).
  bool signal_all = false;
};

// Connection parameters for MoveRcToRts / ConnectRc.
struct RcOptions {
  // Local ACK timeout 4.096 us * 2^14 = 67 ms, as rc_pingpong uses: long enough for a loaded
  // switch, short enough that a dead peer is noticed in retry_cnt * 67 ms.
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;               // transport retries before IBV_WC_RETRY_EXC_ERR
  uint8_t rnr_retry = 7;               // receiver-not-ready retries; 7 means retry forever
  uint8_t min_rnr_timer = 12;          // the RNR NAK delay we ask peers to wait: 12 = 0.64 ms
  uint32_t psn = 0;                    // our first send PSN
  std::optional<uint32_t> remote_psn;  // the peer's first send PSN; defaults to `psn`
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t max_rd_atomic = 1;       // RDMA READs we may have outstanding as requester
  uint8_t max_dest_rd_atomic = 1;  // RDMA READs the peer may have outstanding at us
  // The path. RoCE always carries a GRH (global); InfiniBand routes by remote_lid and needs a
  // GRH only to reach another subnet.
  bool global = true;
  uint8_t gid_index = 0;  // our source GID table index
  uint8_t hop_limit = 1;
  uint8_t traffic_class = 0;  // the GRH's (RoCE v2: the IP header's DSCP << 2 | ECN)
  uint8_t service_level = 0;
  uint16_t remote_lid = 0;
  // Remote access granted at INIT.
  unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
};

// An RC QP and the CQ it owns (if it created one). Move-only; destroys the QP, then the CQ.
// Thread-compatible; the QP itself may be posted to from the thread that owns it.
class RcQueuePair {
 public:
  RcQueuePair(RcQueuePair&& other) noexcept;
  RcQueuePair& operator=(RcQueuePair&& other) noexcept;
  RcQueuePair(const RcQueuePair&) = delete;
  RcQueuePair& operator=(const RcQueuePair&) = delete;
  ~RcQueuePair();

  ibv_qp* qp() const { return qp_; }
  ibv_cq* cq() const { return qp_ != nullptr ? qp_->send_cq : nullptr; }  // send CQ
  uint32_t qp_num() const { return qp_->qp_num; }

 private:
  friend Result<RcQueuePair> CreateRcQueuePair(Library&, ibv_context*, ibv_pd*,
                                               const QueuePairAttrs&, ibv_cq*);
  RcQueuePair() = default;
  void Destroy();

  Library* lib_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_cq* owned_cq_ = nullptr;
};

// Creates an RC QP in RESET whose send and receive queues complete to `cq`, or to a CQ of
// attrs.cq_entries it creates and owns when `cq` is null.
Result<RcQueuePair> CreateRcQueuePair(Library& lib, ibv_context* context, ibv_pd* pd,
                                      const QueuePairAttrs& attrs, ibv_cq* cq = nullptr);

// RESET -> INIT on `port`, granting options.access. Receives may be posted from INIT on, so
// a caller that must never cause RNR posts them between this and MoveRcToRts.
Status MoveRcToInit(Library& lib, ibv_qp* qp, uint8_t port, const RcOptions& options);

// INIT -> RTR -> RTS towards the peer QP `remote_qpn` at `remote_gid`.
Status MoveRcToRts(Library& lib, ibv_qp* qp, uint8_t port, uint32_t remote_qpn, ibv_gid remote_gid,
                   const RcOptions& options);

// RESET -> INIT -> RTR -> RTS: MoveRcToInit then MoveRcToRts.
Status ConnectRc(Library& lib, ibv_qp* qp, uint8_t port, uint32_t remote_qpn, ibv_gid remote_gid,
                 const RcOptions& options = {});

}  // namespace bx::verbs
