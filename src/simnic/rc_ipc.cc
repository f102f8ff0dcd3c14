// The RC transport across processes: requests and replies as IpcLink frames. The responder
// answers every request, including one it drops (Reply::kNoResponse), so the requester starts its
// retry timer without a per-packet timer; the behaviour seen by the application is the same as a
// real timeout (IBV_WC_RETRY_EXC_ERR after retry_cnt retries).
#include <cstring>

#include "simnic/fabric.h"
#include "simnic/ib_timers.h"
#include "simnic/segments.h"

namespace bx::simnic {

bool Fabric::SendIpcRequest(uint32_t pid, uint32_t device_index, const Request& req) {
  IpcHeader h{};
  h.magic = kIpcMagic;
  h.kind = kIpcRequest;
  h.opcode = uint8_t(req.opcode);
  h.src_pid = pid_;
  h.dest_device = device_index;
  h.dest_qpn = req.dest_qpn;
  h.src_qpn = req.src_qpn;
  uint32_t src_pid = 0, src_index = 0;
  ParseGid(req.src_gid, &src_pid, &src_index);
  h.src_device = src_index;
  h.psn = req.psn;
  h.imm_data = req.imm_data;
  h.rkey = req.rkey;
  h.solicited = req.solicited ? 1 : 0;
  h.remote_addr = req.remote_addr;
  h.length = req.length;
  h.payload_length = req.opcode == IBV_WR_RDMA_READ ? 0 : req.length;
  std::memcpy(h.src_gid, req.src_gid.raw, 16);
  return ipc_->Send(pid, h, req.source, req.source_count);
}

void Fabric::OnIpcFrame(IpcFrame& frame) {
  if (frame.header.kind == kIpcRequest) {
    OnIpcRequest(frame);
  } else if (frame.header.kind == kIpcReply) {
    OnIpcReply(frame);
  } else if (frame.header.kind == kIpcDatagram) {
    OnIpcDatagram(frame);
  }
}

void Fabric::OnIpcRequest(IpcFrame& frame) {
  const IpcHeader& h = frame.header;
  Request req{};
  req.dest_qpn = h.dest_qpn;
  req.src_qpn = h.src_qpn;
  std::memcpy(req.src_gid.raw, h.src_gid, 16);
  req.psn = h.psn;
  req.opcode = ibv_wr_opcode(h.opcode);
  req.solicited = h.solicited != 0;
  req.imm_data = h.imm_data;
  req.remote_addr = h.remote_addr;
  req.rkey = h.rkey;
  req.length = h.length;
  iovec source{frame.payload.data(), frame.payload.size()};
  req.source = &source;
  req.source_count = frame.payload.empty() ? 0 : 1;
  std::vector<uint8_t> read_data;
  iovec sink{};
  if (req.opcode == IBV_WR_RDMA_READ) {
    read_data.resize(h.length);
    sink = iovec{read_data.data(), read_data.size()};
    req.sink = &sink;
    req.sink_count = 1;
  }
  uint8_t rnr_timer = 0;
  Device* dev = device(h.dest_device);
  Reply reply =
      (dev != nullptr && dev->link_up()) ? Respond(dev, req, &rnr_timer) : Reply::kNoResponse;
  IpcHeader r{};
  r.magic = kIpcMagic;
  r.kind = kIpcReply;
  r.reply = uint8_t(reply);
  r.rnr_timer = rnr_timer;
  r.src_pid = pid_;
  r.dest_device = h.src_device;
  r.dest_qpn = h.src_qpn;
  r.psn = h.psn;
  bool with_data = reply == Reply::kAck && req.opcode == IBV_WR_RDMA_READ;
  r.payload_length = with_data ? h.length : 0;
  ipc_->Send(h.src_pid, r, with_data ? &sink : nullptr, with_data ? 1 : 0);
}

void Fabric::OnIpcReply(IpcFrame& frame) {
  const IpcHeader& h = frame.header;
  Device* dev = device(h.dest_device);
  SimQp* qp = dev ? dev->FindQp(h.dest_qpn) : nullptr;
  if (qp == nullptr || qp->destroyed || qp->state.load() != IBV_QPS_RTS) return;
  if (qp->sq_hw_done >= qp->sq_hw_next) return;
  uint64_t index = qp->sq_hw_done;
  SendWqe& wqe = qp->sq[index % qp->sq.size()];
  if (wqe.psn != h.psn) return;  // a reply to a request dropped after an earlier NAK
  Reply reply = Reply(h.reply);
  if (reply == Reply::kAck && wqe.opcode == IBV_WR_RDMA_READ) {
    iovec local[kMaxSge];
    int count = 0;
    uint64_t total = 0;
    if (ResolveSges(*dev, qp->protection_domain, wqe.sge, wqe.num_sge, IBV_ACCESS_LOCAL_WRITE,
                    local, &count, &total)) {
      iovec data{frame.payload.data(), frame.payload.size()};
      CopySegments(local, count, &data, 1);
    } else {
      reply = Reply::kLocalProtection;
    }
  }
  HandleReply(qp, index, reply, h.rnr_timer, NowNs());
  if (qp->state.load() == IBV_QPS_RTS && qp->wake_at_ns == 0) ServiceQp(qp);
}

void Fabric::OnIpcPeerLost(uint32_t pid) {
  uint64_t now = NowNs();
  for (Device* dev : devices()) {
    for (SimQp* qp : dev->AllQps()) {
      uint32_t peer_pid = 0, peer_index = 0;
      if (!ParseGid(qp->peer_address, &peer_pid, &peer_index) || peer_pid != pid) continue;
      if (qp->destroyed || qp->state.load() != IBV_QPS_RTS || qp->sq_hw_done >= qp->sq_hw_next)
        continue;
      HandleReply(qp, qp->sq_hw_done, Reply::kNoResponse, 0, now);
    }
  }
}

}  // namespace bx::simnic
