// The responder half of the RC transport: validates an incoming request against the QP's
// connection, PSN, receive queue and memory keys, places the data and writes receive completions.
#include <cstring>

#include "simnic/fabric.h"
#include "simnic/segments.h"
#include "simnic/verbs_internal.h"

namespace bx::simnic {
namespace {

bool ConsumesReceive(ibv_wr_opcode op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_SEND_WITH_INV ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

}  // namespace

Reply Fabric::Respond(Device* device, const Request& req, uint8_t* rnr_timer) {
  SimQp* qp = device->FindQp(req.dest_qpn);
  if (qp == nullptr || qp->destroyed) return Reply::kNoResponse;
  int state = qp->state.load(std::memory_order_acquire);
  if (state != IBV_QPS_RTR && state != IBV_QPS_RTS) return Reply::kNoResponse;
  // An RC QP answers only its connected peer, and only the next PSN in sequence.
  if (qp->attr.dest_qp_num != req.src_qpn || !GidEqual(qp->peer_address, req.src_gid))
    return Reply::kNoResponse;
  if (req.psn != qp->expected_psn) return Reply::kNoResponse;

  const bool consumes_receive = ConsumesReceive(req.opcode);
  // The receive this request will consume: the QP's next, or the SRQ's oldest (taken now, given
  // back if the request fails before consuming it).
  RecvWqe srq_recv;
  bool limit_reached = false;
  if (consumes_receive &&
      (qp->srq != nullptr ? !TakeSrqReceive(qp->srq, &srq_recv, &limit_reached)
                          : qp->rq_consumed == qp->rq_posted.load(std::memory_order_acquire))) {
    device->counters().rnr_naks.fetch_add(1, std::memory_order_relaxed);
    *rnr_timer = qp->attr.min_rnr_timer;
    return Reply::kRnrNak;
  }
  if (limit_reached) {
    PostAsyncEvent(qp->srq->context, IBV_EVENT_SRQ_LIMIT_REACHED, &qp->srq->srq);
  }

  const bool is_write = req.opcode == IBV_WR_RDMA_WRITE || req.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool is_read = req.opcode == IBV_WR_RDMA_READ;
  if ((is_write || is_read) && req.length > 0) {
    int need = is_write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
    uint8_t* host = device->ResolveRemote(qp, req.rkey, req.remote_addr, req.length, need);
    if (host == nullptr) {
      if (consumes_receive && qp->srq != nullptr) ReturnSrqReceive(qp->srq, srq_recv);
      EnterError(qp, IBV_EVENT_QP_ACCESS_ERR);
      return Reply::kRemoteAccess;
    }
    iovec target{host, req.length};
    if (is_write) {
      CopySegments(&target, 1, req.source, req.source_count);
    } else {
      CopySegments(req.sink, req.sink_count, &target, 1);
    }
  }

  if (consumes_receive) {
    const uint64_t slot = qp->rq_consumed;
    const RecvWqe& recv = qp->srq != nullptr ? srq_recv : qp->rq[slot % qp->rq.size()];
    ibv_wc wc{};
    wc.wr_id = recv.wr_id;
    wc.qp_num = qp->qp.qp_num;
    wc.src_qp = req.src_qpn;
    wc.byte_len = req.length;
    wc.wc_flags = IBV_WC_GRH;
    wc.opcode = req.opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    Reply reply = Reply::kAck;
    if (req.opcode == IBV_WR_SEND_WITH_INV) {
      // The window is invalidated before the completion reports it, so once the application
      // sees IBV_WC_WITH_INV no further access through the key can succeed.
      wc.wc_flags |= IBV_WC_WITH_INV;
      wc.invalidated_rkey = req.imm_data;
      if (!device->InvalidateRemote(qp, req.imm_data)) {
        wc.status = IBV_WC_REM_INV_REQ_ERR;
        reply = Reply::kRemoteInvalid;
      }
    } else if (req.opcode != IBV_WR_SEND) {
      wc.wc_flags |= IBV_WC_WITH_IMM;
      wc.imm_data = req.imm_data;
    }
    if (reply == Reply::kAck && req.opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
      iovec place[kMaxSge];
      int place_count = 0;
      uint64_t capacity = 0;
      if (!ResolveReceive(*qp, recv, place, &place_count, &capacity)) {
        wc.status = IBV_WC_LOC_PROT_ERR;
        reply = Reply::kRemoteOp;
      } else if (capacity < req.length) {
        wc.status = IBV_WC_LOC_LEN_ERR;
        reply = Reply::kRemoteInvalid;
      } else {
        CopySegments(place, place_count, req.source, req.source_count);
      }
    }
    // With an SRQ the CQE retires one SRQ WQE when polled; the QP's own ring is untouched.
    if (qp->srq == nullptr) qp->rq_consumed = slot + 1;
    PushCompletion(ToSim(qp->qp.recv_cq), wc, qp, slot + 1, false, req.solicited);
    if (reply != Reply::kAck) {
      EnterError(qp, IBV_EVENT_QP_REQ_ERR);
      return reply;
    }
  }

  qp->expected_psn = (qp->expected_psn + 1) & 0xffffff;
  device->counters().packets_received.fetch_add(1, std::memory_order_relaxed);
  device->counters().bytes_received.fetch_add(req.length, std::memory_order_relaxed);
  return Reply::kAck;
}

}  // namespace bx::simnic
