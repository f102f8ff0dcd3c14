// The requester half of the RC transport: transmits send work requests in order, retries after
// RNR NAKs and lost responses, completes work requests, and flushes a QP in error.
#include <algorithm>
#include <cstring>

#include "simnic/fabric.h"
#include "simnic/ib_timers.h"
#include "simnic/segments.h"

namespace bx::simnic {
namespace {

// WQEs transmitted per QP visit before the hardware moves on, so one busy QP cannot starve others.
constexpr int kWqesPerVisit = 16;
// With timeout = 0 (wait forever), a lost request is still retransmitted now and then, so a link
// that comes back up resumes the transfer as it would on a real fabric.
constexpr uint64_t kInfiniteTimeoutProbeNs = 100'000'000;

ibv_wc_opcode SendWcOpcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;
  }
}

}  // namespace

void Fabric::StageWqe(SimQp* qp, SendWqe& wqe, uint64_t now) {
  Device* dev = qp->device;
  if (IsLocalOp(wqe.opcode)) {
    wqe.ready_at_ns = now + dev->completion_delay_ns.load(std::memory_order_relaxed);
    return;
  }
  wqe.psn = qp->next_send_psn;
  qp->next_send_psn = (qp->next_send_psn + 1) & 0xffffff;
  wqe.retries_left = qp->attr.retry_cnt;
  wqe.rnr_retries_left = qp->attr.rnr_retry;
  uint64_t ready = now;
  double gbps = dev->link_gbps.load(std::memory_order_relaxed);
  if (gbps > 0) {
    // Serialisation on the port: a WQE leaves when the previous one has left.
    uint64_t start = std::max(now, dev->port_busy_until_ns);
    uint64_t wire_ns = uint64_t(double(wqe.length) * 8.0 / gbps);
    dev->port_busy_until_ns = start + wire_ns;
    ready = start + wire_ns;
  }
  ready += dev->link_latency_ns.load(std::memory_order_relaxed);
  ready += dev->completion_delay_ns.load(std::memory_order_relaxed);
  wqe.ready_at_ns = ready;
}

void Fabric::ServiceQp(SimQp* qp, uint64_t byte_budget) {
  if (qp->destroyed) return;
  int state = qp->state.load(std::memory_order_seq_cst);
  if (state == IBV_QPS_ERR) {
    FlushQp(qp);
    return;
  }
  if (state != IBV_QPS_RTS || qp->wake_at_ns != 0) return;
  uint64_t posted = qp->sq_posted.load(std::memory_order_seq_cst);
  uint64_t now = NowNs();
  for (int budget = kWqesPerVisit; budget > 0 && qp->sq_hw_next < posted; --budget) {
    uint64_t index = qp->sq_hw_next;
    SendWqe& wqe = qp->sq[index % qp->sq.size()];
    if (index >= qp->sq_hw_staged) {
      StageWqe(qp, wqe, now);
      qp->sq_hw_staged = index + 1;
    }
    if (wqe.ready_at_ns > now) {
      now = NowNs();
      if (wqe.ready_at_ns > now) {
        ScheduleTimer(qp, wqe.ready_at_ns);
        return;
      }
    }
    if (IsLocalOp(wqe.opcode)) {
      // Executed once every request before it has completed, so a bind or invalidate is never
      // undone by a retransmission and takes effect in send-queue order. A request still
      // waiting for another process's reply holds it; that reply services the QP again.
      if (qp->sq_hw_done < index) return;
      ExecuteLocal(qp, index);
      if (qp->state.load() != IBV_QPS_RTS) return;
      continue;
    }
    if (wqe.length > byte_budget) break;  // left to the hardware thread (requeued below)
    byte_budget -= wqe.length;
    uint8_t rnr_timer = 0;
    Reply reply = Transmit(qp, wqe, &rnr_timer);
    if (reply == Reply::kPending) {
      ++qp->sq_hw_next;
      continue;
    }
    HandleReply(qp, index, reply, rnr_timer, now);
    if (qp->state.load() != IBV_QPS_RTS || qp->wake_at_ns != 0) return;
  }
  if (qp->sq_hw_next < posted && !qp->queued.exchange(true)) {
    std::lock_guard lock(ready_mu_);
    ready_.push_back(qp);
  }
}

Reply Fabric::Transmit(SimQp* qp, SendWqe& wqe, uint8_t* rnr_timer) {
  if (qp->qp.qp_type == IBV_QPT_UD) return TransmitDatagram(qp, wqe);
  Device* dev = qp->device;
  iovec local[kMaxSge];
  int local_count = 0;
  const int access = wqe.opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
  if (!ResolveSendData(*qp, wqe, access, local, &local_count)) return Reply::kLocalProtection;
  if (!dev->PortUp(qp->attr.port_num)) return Reply::kNoResponse;

  uint32_t peer_pid = 0, peer_index = 0;
  if (!ParseGid(qp->peer_address, &peer_pid, &peer_index)) return Reply::kNoResponse;

  bool is_read = wqe.opcode == IBV_WR_RDMA_READ;
  Request request{};
  request.dest_qpn = qp->attr.dest_qp_num;
  request.src_qpn = qp->qp.qp_num;
  request.src_gid = dev->gid();
  request.psn = wqe.psn;
  request.opcode = wqe.opcode;
  request.solicited = wqe.solicited;
  request.imm_data = wqe.imm_data;
  request.remote_addr = wqe.remote_addr;
  request.rkey = wqe.rkey;
  request.length = wqe.length;
  request.source = is_read ? nullptr : local;
  request.source_count = is_read ? 0 : local_count;
  request.sink = is_read ? local : nullptr;
  request.sink_count = is_read ? local_count : 0;

  if (peer_pid == pid_) {
    Device* peer = device(peer_index);
    if (peer == nullptr || !peer->link_up()) return Reply::kNoResponse;
    return Respond(peer, request, rnr_timer);
  }
  if (!ipc_ || partitions_.Cut(peer_pid, NowNs())) return Reply::kNoResponse;
  return SendIpcRequest(peer_pid, peer_index, request) ? Reply::kPending : Reply::kNoResponse;
}

void Fabric::HandleReply(SimQp* qp, uint64_t index, Reply reply, uint8_t rnr_timer, uint64_t now) {
  SendWqe& wqe = qp->sq[index % qp->sq.size()];
  switch (reply) {
    case Reply::kAck: {
      Device* dev = qp->device;
      dev->counters().packets_sent.fetch_add(1, std::memory_order_relaxed);
      dev->counters().bytes_sent.fetch_add(wqe.length, std::memory_order_relaxed);
      if (qp->roce_v1) dev->counters().roce_v1_packets.fetch_add(1, std::memory_order_relaxed);
      if (qp->unmarked) dev->counters().unmarked_packets.fetch_add(1, std::memory_order_relaxed);
      CompleteSend(qp, index, IBV_WC_SUCCESS);
      return;
    }
    case Reply::kRnrNak:
      if (qp->attr.rnr_retry != kInfiniteRnrRetry) {
        if (wqe.rnr_retries_left == 0) {
          qp->device->counters().rnr_retry_exceeded.fetch_add(1, std::memory_order_relaxed);
          FailSend(qp, index, IBV_WC_RNR_RETRY_EXC_ERR);
          return;
        }
        --wqe.rnr_retries_left;
      }
      qp->sq_hw_next = index;  // go back: later requests in flight are dropped by the responder
      ScheduleTimer(qp, now + RnrTimerNs(rnr_timer));
      return;
    case Reply::kNoResponse: {
      uint64_t timeout = AckTimeoutNs(qp->attr.timeout);
      if (timeout != 0) {
        if (wqe.retries_left == 0) {
          FailSend(qp, index, IBV_WC_RETRY_EXC_ERR);
          return;
        }
        --wqe.retries_left;
      }
      qp->sq_hw_next = index;
      ScheduleTimer(qp, now + (timeout != 0 ? timeout : kInfiniteTimeoutProbeNs));
      return;
    }
    case Reply::kRemoteAccess:
      return FailSend(qp, index, IBV_WC_REM_ACCESS_ERR);
    case Reply::kRemoteInvalid:
      return FailSend(qp, index, IBV_WC_REM_INV_REQ_ERR);
    case Reply::kRemoteOp:
      return FailSend(qp, index, IBV_WC_REM_OP_ERR);
    case Reply::kLocalProtection:
      return FailSend(qp, index, IBV_WC_LOC_PROT_ERR);
    case Reply::kLocalLength:
      return FailSend(qp, index, IBV_WC_LOC_LEN_ERR);
    case Reply::kPending:
    case Reply::kFlushed:
      return;
  }
}

void Fabric::ExecuteLocal(SimQp* qp, uint64_t index) {
  SendWqe& wqe = qp->sq[index % qp->sq.size()];
  ibv_wc_status status = wqe.opcode == IBV_WR_BIND_MW
                             ? qp->device->BindMw(qp, wqe)
                             : qp->device->InvalidateLocal(qp, wqe.imm_data);
  if (status == IBV_WC_SUCCESS) {
    CompleteSend(qp, index, status);
  } else {
    FailSend(qp, index, status);
  }
}

void Fabric::CompleteSend(SimQp* qp, uint64_t index, ibv_wc_status status) {
  SendWqe& wqe = qp->sq[index % qp->sq.size()];
  qp->sq_hw_done = index + 1;
  qp->sq_hw_next = std::max(qp->sq_hw_next, index + 1);
  // Errors complete even unsignalled work requests, as on hardware.
  if (!(wqe.signaled || qp->sq_sig_all || status != IBV_WC_SUCCESS)) return;
  ibv_wc wc{};
  wc.wr_id = wqe.wr_id;
  wc.status = status;
  wc.opcode = SendWcOpcode(wqe.opcode);
  wc.byte_len = wqe.opcode == IBV_WR_RDMA_READ ? wqe.length : 0;
  wc.qp_num = qp->qp.qp_num;
  PushCompletion(ToSim(qp->qp.send_cq), wc, qp, index + 1, true, false);
}

// A requester error: the work request completes with `status` (signalled or not) and the QP
// goes to error, flushing everything after it.
void Fabric::FailSend(SimQp* qp, uint64_t index, ibv_wc_status status) {
  CompleteSend(qp, index, status);
  EnterError(qp, IBV_EVENT_QP_FATAL);
}

void Fabric::EnterError(SimQp* qp, ibv_event_type event) {
  if (qp->SetErrorState()) PostAsyncEvent(qp->device, event, &qp->qp);
  FlushQp(qp);
}

void Fabric::FlushQp(SimQp* qp) {
  uint64_t posted = qp->sq_posted.load(std::memory_order_seq_cst);
  for (uint64_t i = qp->sq_hw_done; i < posted; ++i) {
    SendWqe& wqe = qp->sq[i % qp->sq.size()];
    ibv_wc wc{};
    wc.wr_id = wqe.wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = SendWcOpcode(wqe.opcode);
    wc.qp_num = qp->qp.qp_num;
    PushCompletion(ToSim(qp->qp.send_cq), wc, qp, i + 1, true, false);
  }
  qp->sq_hw_done = qp->sq_hw_next = qp->sq_hw_staged = posted;
  qp->wake_at_ns = 0;
  if (qp->srq != nullptr) {
    // The SRQ's receives belong to the SRQ, not to this QP: none is flushed. The QP will take
    // no more of them, which the application learns from this event (it may then destroy it).
    if (!qp->last_wqe_reported) {
      qp->last_wqe_reported = true;
      PostAsyncEvent(qp->device, IBV_EVENT_QP_LAST_WQE_REACHED, &qp->qp);
    }
    return;
  }
  uint64_t recv_posted = qp->rq_posted.load(std::memory_order_acquire);
  for (uint64_t i = qp->rq_consumed; i < recv_posted; ++i) {
    ibv_wc wc{};
    wc.wr_id = qp->rq[i % qp->rq.size()].wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->qp.qp_num;
    PushCompletion(ToSim(qp->qp.recv_cq), wc, qp, i + 1, false, false);
  }
  qp->rq_consumed = recv_posted;
}

}  // namespace bx::simnic
