// Unreliable datagrams (IBV_QPT_UD): one MTU per send, addressed by an address handle, a remote
// QP number and a Q_Key. Nothing is acknowledged: a send completes once it has left the port,
// and a receiver without a posted receive, with another Q_Key or with no such QP drops the
// datagram (counted as datagrams_dropped) without telling the sender.
//
// The receive buffer's first 40 bytes hold the Global Route Header when the datagram carried one
// (always on RoCE; on InfiniBand when the AV was global) and are left alone otherwise; the
// payload follows them and byte_len counts both (ibv_post_recv(3), "UD"). The GRH is written in
// the IB layout (version, class, flow, payload length, next header, hop limit, source and
// destination GID) for RoCE v2's IPv4-mapped GIDs too, where a NIC writes an IPv4 header in the
// last 20 bytes; libibverbs' ibv_init_ah_from_wc reads both.
#include <endian.h>

#include <cstring>

#include "simnic/fabric.h"
#include "simnic/ib_timers.h"
#include "simnic/segments.h"
#include "simnic/verbs_internal.h"

namespace bx::simnic {
namespace {

uint32_t MtuBytes(ibv_mtu mtu) {
  return 128u << unsigned(mtu);  // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5
}

ibv_grh MakeGrh(const DatagramRoute& route, uint32_t length) {
  ibv_grh grh{};
  grh.version_tclass_flow =
      htobe32((6u << 28) | (uint32_t(route.traffic_class) << 20) | (route.flow_label & 0xfffff));
  // IB payload length: transport headers (BTH 12 + DETH 8), payload, ICRC 4.
  grh.paylen = htobe16(uint16_t(length + 24));
  grh.next_hdr = 0x1b;  // IBA: the next header is a BTH
  grh.hop_limit = route.hop_limit;
  grh.sgid = route.source_gid;
  grh.dgid = route.dest_gid;
  return grh;
}

// The segments from byte `offset` on (the receive buffer past its GRH room).
int SkipBytes(const iovec* in, int count, uint64_t offset, iovec* out) {
  int n = 0;
  for (int i = 0; i < count; ++i) {
    if (offset >= in[i].iov_len) {
      offset -= in[i].iov_len;
      continue;
    }
    out[n++] = iovec{static_cast<uint8_t*>(in[i].iov_base) + offset, in[i].iov_len - offset};
    offset = 0;
  }
  return n;
}

}  // namespace

Reply Fabric::TransmitDatagram(SimQp* qp, SendWqe& wqe) {
  Device* dev = qp->device;
  iovec local[kMaxSge];
  int local_count = 0;
  if (!ResolveSendData(*qp, wqe, 0, local, &local_count)) return Reply::kLocalProtection;
  // One MTU at most: a longer datagram fails its send (a local length error; no packet).
  if (wqe.length > MtuBytes(dev->profile().active_mtu)) return Reply::kLocalLength;

  const UdAddress& to = wqe.ud;
  Datagram d{};
  d.dest_qpn = to.remote_qpn;
  d.src_qpn = qp->qp.qp_num;
  d.qkey = to.qkey;
  d.with_imm = wqe.opcode == IBV_WR_SEND_WITH_IMM;
  d.solicited = wqe.solicited;
  d.imm_data = wqe.imm_data;
  d.src_lid = dev->lid();
  d.route = to.route;
  // RoCE carries a GRH on every packet; InfiniBand when the AV is global.
  d.route.global |= dev->profile().link_layer != IBV_LINK_LAYER_INFINIBAND;
  d.length = wqe.length;
  d.payload = local;
  d.payload_count = local_count;

  // Lost on the way (port down, no such address, a partition): the sender cannot tell.
  uint32_t peer_pid = 0, peer_index = 0;
  if (dev->PortUp(qp->attr.port_num) && ParseGid(to.peer_address, &peer_pid, &peer_index)) {
    if (peer_pid == pid_) {
      Device* peer = device(peer_index);
      if (peer != nullptr && peer->link_up()) DeliverDatagram(peer, d);
    } else if (ipc_ && !partitions_.Cut(peer_pid, NowNs())) {
      IpcHeader h{};
      h.magic = kIpcMagic;
      h.kind = kIpcDatagram;
      h.opcode = uint8_t(wqe.opcode);
      h.src_pid = pid_;
      h.dest_device = peer_index;
      h.dest_qpn = d.dest_qpn;
      h.src_device = uint32_t(dev->index());
      h.src_qpn = d.src_qpn;
      h.imm_data = d.imm_data;
      h.solicited = d.solicited ? 1 : 0;
      h.length = d.length;
      h.payload_length = d.length;
      std::memcpy(h.src_gid, d.route.source_gid.raw, 16);
      std::memcpy(h.dest_gid, d.route.dest_gid.raw, 16);
      h.qkey = d.qkey;
      h.flow_label = d.route.flow_label;
      h.src_lid = d.src_lid;
      h.sl = d.route.sl;
      h.traffic_class = d.route.traffic_class;
      h.hop_limit = d.route.hop_limit;
      h.global = d.route.global ? 1 : 0;
      (void)ipc_->Send(peer_pid, h, local, local_count);
    }
  }
  // A datagram to this very QP that failed its receive put the QP in error, and the flush
  // completed this WQE with the rest.
  if (qp->state.load(std::memory_order_acquire) == IBV_QPS_ERR) return Reply::kFlushed;
  return Reply::kAck;
}

void Fabric::OnIpcDatagram(IpcFrame& frame) {
  const IpcHeader& h = frame.header;
  Device* dev = device(h.dest_device);
  if (dev == nullptr || !dev->link_up() || h.length != frame.payload.size()) return;
  Datagram d{};
  d.dest_qpn = h.dest_qpn;
  d.src_qpn = h.src_qpn;
  d.qkey = h.qkey;
  d.with_imm = h.opcode == IBV_WR_SEND_WITH_IMM;
  d.solicited = h.solicited != 0;
  d.imm_data = h.imm_data;
  d.src_lid = h.src_lid;
  d.route.sl = h.sl;
  d.route.global = h.global != 0;
  d.route.traffic_class = h.traffic_class;
  d.route.hop_limit = h.hop_limit;
  d.route.flow_label = h.flow_label;
  std::memcpy(d.route.source_gid.raw, h.src_gid, 16);
  std::memcpy(d.route.dest_gid.raw, h.dest_gid, 16);
  d.length = h.length;
  iovec payload{frame.payload.data(), frame.payload.size()};
  d.payload = &payload;
  d.payload_count = frame.payload.empty() ? 0 : 1;
  DeliverDatagram(dev, d);
}

void Fabric::DeliverDatagram(Device* device, const Datagram& d) {
  SimQp* qp = device->FindQp(d.dest_qpn);
  const int state = qp != nullptr ? qp->state.load(std::memory_order_acquire) : IBV_QPS_RESET;
  RecvWqe srq_recv;
  bool limit_reached = false;
  const bool received =
      qp != nullptr && !qp->destroyed && qp->qp.qp_type == IBV_QPT_UD &&
      (state == IBV_QPS_RTR || state == IBV_QPS_RTS) && qp->attr.qkey == d.qkey &&
      (qp->srq != nullptr ? TakeSrqReceive(qp->srq, &srq_recv, &limit_reached)
                          : qp->rq_consumed < qp->rq_posted.load(std::memory_order_acquire));
  if (!received) {
    device->counters().datagrams_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (limit_reached) PostAsyncEvent(qp->srq->context, IBV_EVENT_SRQ_LIMIT_REACHED, &qp->srq->srq);

  const uint64_t slot = qp->rq_consumed;
  const RecvWqe& recv = qp->srq != nullptr ? srq_recv : qp->rq[slot % qp->rq.size()];
  ibv_wc wc{};
  wc.wr_id = recv.wr_id;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = qp->qp.qp_num;
  wc.src_qp = d.src_qpn;
  wc.byte_len = kGrhBytes + d.length;
  wc.slid = d.src_lid;
  wc.sl = d.route.sl;
  wc.pkey_index = qp->attr.pkey_index;
  if (d.route.global) wc.wc_flags |= IBV_WC_GRH;
  if (d.with_imm) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = d.imm_data;
  }
  iovec place[kMaxSge];
  int place_count = 0;
  uint64_t capacity = 0;
  if (!ResolveReceive(*qp, recv, place, &place_count, &capacity)) {
    wc.status = IBV_WC_LOC_PROT_ERR;
  } else if (capacity < kGrhBytes + d.length) {
    wc.status = IBV_WC_LOC_LEN_ERR;
  } else {
    if (d.route.global) {
      ibv_grh grh = MakeGrh(d.route, d.length);
      iovec header{&grh, kGrhBytes};
      CopySegments(place, place_count, &header, 1);
    }
    iovec body[kMaxSge];
    const int body_count = SkipBytes(place, place_count, kGrhBytes, body);
    CopySegments(body, body_count, d.payload, d.payload_count);
  }
  if (qp->srq == nullptr) qp->rq_consumed = slot + 1;
  PushCompletion(ToSim(qp->qp.recv_cq), wc, qp, slot + 1, false, d.solicited);
  // A receive that failed puts the QP in error, as on any QP type (IBA 10.8.3).
  if (wc.status != IBV_WC_SUCCESS) {
    EnterError(qp, IBV_EVENT_QP_FATAL);
    return;
  }
  device->counters().packets_received.fetch_add(1, std::memory_order_relaxed);
  device->counters().bytes_received.fetch_add(d.length, std::memory_order_relaxed);
}

}  // namespace bx::simnic
