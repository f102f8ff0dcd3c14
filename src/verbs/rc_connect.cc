#include "verbs/rc_connect.h"

#include <atomic>
#include <cerrno>
#include <string>
#include <utility>

#include "verbs/rc_count.h"

namespace bx::verbs {
namespace {

// LiveRcQueuePairs: incremented when a QP is created, decremented when it is destroyed.
std::atomic<int64_t> g_live_rc_qps{0};

// ibv_modify_qp returns the errno value itself; some providers return -1 and set errno.
Status ModifyQp(Library& lib, ibv_qp* qp, ibv_qp_attr* attr, int mask, std::string_view step) {
  errno = 0;
  int rc = lib.modify_qp(qp, attr, mask);
  if (rc == 0) return Status::Ok();
  int err = rc > 0 ? rc : (errno != 0 ? errno : EINVAL);
  return Status::FromErrno(
      err, "ibv_modify_qp(qp " + std::to_string(qp->qp_num) + ", " + std::string(step) + ")");
}

}  // namespace

int64_t LiveRcQueuePairs() {
  return g_live_rc_qps.load(std::memory_order_relaxed);
}

RcQueuePair::RcQueuePair(RcQueuePair&& other) noexcept
    : lib_(other.lib_),
      qp_(std::exchange(other.qp_, nullptr)),
      owned_cq_(std::exchange(other.owned_cq_, nullptr)) {}

RcQueuePair& RcQueuePair::operator=(RcQueuePair&& other) noexcept {
  if (this != &other) {
    Destroy();
    lib_ = other.lib_;
    qp_ = std::exchange(other.qp_, nullptr);
    owned_cq_ = std::exchange(other.owned_cq_, nullptr);
  }
  return *this;
}

RcQueuePair::~RcQueuePair() {
  Destroy();
}

void RcQueuePair::Destroy() {
  // The QP first: a CQ that a QP still completes to cannot be destroyed (EBUSY).
  if (qp_ != nullptr) {
    lib_->destroy_qp(std::exchange(qp_, nullptr));
    g_live_rc_qps.fetch_sub(1, std::memory_order_relaxed);
  }
  if (owned_cq_ != nullptr) lib_->destroy_cq(std::exchange(owned_cq_, nullptr));
}

Result<RcQueuePair> CreateRcQueuePair(Library& lib, ibv_context* context, ibv_pd* pd,
                                      const QueuePairAttrs& attrs, ibv_cq* cq) {
  RcQueuePair result;
  result.lib_ = &lib;
  if (cq == nullptr) {
    errno = 0;
    result.owned_cq_ = lib.create_cq(context, attrs.cq_entries, nullptr, nullptr, 0);
    if (result.owned_cq_ == nullptr) {
      return Status::FromErrno(errno != 0 ? errno : ENOMEM,
                               "ibv_create_cq(" + std::to_string(attrs.cq_entries) + " entries)");
    }
    cq = result.owned_cq_;
  }
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = attrs.signal_all ? 1 : 0;
  init.cap.max_send_wr = attrs.max_send_wr;
  init.cap.max_recv_wr = attrs.max_recv_wr;
  init.cap.max_send_sge = attrs.max_send_sge;
  init.cap.max_recv_sge = attrs.max_recv_sge;
  init.cap.max_inline_data = attrs.max_inline_data;
  errno = 0;
  result.qp_ = lib.create_qp(pd, &init);
  if (result.qp_ == nullptr) {
    return Status::FromErrno(errno != 0 ? errno : ENOMEM, "ibv_create_qp(RC)");
  }
  g_live_rc_qps.fetch_add(1, std::memory_order_relaxed);
  return result;
}

Status MoveRcToInit(Library& lib, ibv_qp* qp, uint8_t port, const RcOptions& options) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port;
  attr.qp_access_flags = options.access;
  return ModifyQp(lib, qp, &attr,
                  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                  "RESET->INIT");
}

Status MoveRcToRts(Library& lib, ibv_qp* qp, uint8_t port, uint32_t remote_qpn, ibv_gid remote_gid,
                   const RcOptions& options) {
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = options.mtu;
  rtr.dest_qp_num = remote_qpn;
  rtr.rq_psn = options.remote_psn.value_or(options.psn);
  rtr.max_dest_rd_atomic = options.max_dest_rd_atomic;
  rtr.min_rnr_timer = options.min_rnr_timer;
  rtr.ah_attr.is_global = options.global ? 1 : 0;
  rtr.ah_attr.dlid = options.remote_lid;
  rtr.ah_attr.sl = options.service_level;
  rtr.ah_attr.port_num = port;
  rtr.ah_attr.grh.dgid = remote_gid;
  rtr.ah_attr.grh.sgid_index = options.gid_index;
  rtr.ah_attr.grh.hop_limit = options.hop_limit;
  rtr.ah_attr.grh.traffic_class = options.traffic_class;
  BX_RETURN_IF_ERROR(ModifyQp(lib, qp, &rtr,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                              "INIT->RTR"));
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.timeout = options.timeout;
  rts.retry_cnt = options.retry_cnt;
  rts.rnr_retry = options.rnr_retry;
  rts.sq_psn = options.psn;
  rts.max_rd_atomic = options.max_rd_atomic;
  return ModifyQp(lib, qp, &rts,
                  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                  "RTR->RTS");
}

Status ConnectRc(Library& lib, ibv_qp* qp, uint8_t port, uint32_t remote_qpn, ibv_gid remote_gid,
                 const RcOptions& options) {
  BX_RETURN_IF_ERROR(MoveRcToInit(lib, qp, port, options));
  return MoveRcToRts(lib, qp, port, remote_qpn, remote_gid, options);
}

}  // namespace bx::verbs
