// ibv_create_qp_ex and the work-request API of an extended QP (ibv_wr_post(3)). ibv_wr_start
// takes the QP's send lock; each builder (ibv_wr_send, ibv_wr_rdma_write, ...) begins a work
// request with the QP's wr_id and wr_flags, and the setters (ibv_wr_set_sge, ...) give it data.
// ibv_wr_complete checks the whole batch and posts it, or posts none of it and returns the first
// error (as mlx5 does); ibv_wr_abort drops it. Both release the lock.
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "simnic/verbs_internal.h"

namespace bx::simnic {
namespace {

// The operations of an RC QP on this NIC: no atomics, no TSO, no XRC addressing. A UD QP sends.
constexpr uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_LOCAL_INV |
    IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV;
constexpr uint64_t kSupportedUdSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
constexpr uint32_t kKnownQpCompMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                                      IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                      IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE |
                                      IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
constexpr uint32_t kUnsupportedCompMask =
    IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;

// CreateQp reads an ibv_qp_init_attr_ex through its ibv_qp_init_attr prefix.
static_assert(offsetof(ibv_qp_init_attr_ex, sq_sig_all) == offsetof(ibv_qp_init_attr, sq_sig_all));
static_assert(offsetof(ibv_qp_init_attr_ex, cap) == offsetof(ibv_qp_init_attr, cap));

// The first error of a batch is the one ibv_wr_complete reports.
void Fail(SimQp* qp, int error) {
  if (qp->batch_error == 0) qp->batch_error = error;
}

// Begins a work request; null (and the batch failed) when the send queue cannot hold it.
StagedWr* Begin(ibv_qp_ex* q, ibv_wr_opcode opcode) {
  SimQp* qp = ToSim(q);
  if (qp->batch.size() >= qp->max_send_wr) {
    Fail(qp, ENOMEM);
    return nullptr;
  }
  StagedWr& s = qp->batch.emplace_back();
  s.wr.wr_id = q->wr_id;
  s.wr.opcode = opcode;
  // Inline data comes from ibv_wr_set_inline_data, not from a flag (ibv_wr_post(3)).
  s.wr.send_flags = q->wr_flags & ~unsigned(IBV_SEND_INLINE);
  return &s;
}

// The work request the setters apply to: the last one begun.
StagedWr* Last(ibv_qp_ex* q) {
  SimQp* qp = ToSim(q);
  if (qp->batch.empty()) {
    Fail(qp, EINVAL);
    return nullptr;
  }
  return &qp->batch.back();
}

void Send(ibv_qp_ex* q) {
  Begin(q, IBV_WR_SEND);
}

void SendImm(ibv_qp_ex* q, __be32 imm_data) {
  if (StagedWr* s = Begin(q, IBV_WR_SEND_WITH_IMM)) s->wr.imm_data = imm_data;
}

void SendInv(ibv_qp_ex* q, uint32_t invalidate_rkey) {
  if (StagedWr* s = Begin(q, IBV_WR_SEND_WITH_INV)) s->wr.invalidate_rkey = invalidate_rkey;
}

void RemoteAccess(ibv_qp_ex* q, ibv_wr_opcode opcode, uint32_t rkey, uint64_t remote_addr,
                  __be32 imm_data) {
  if (StagedWr* s = Begin(q, opcode)) {
    s->wr.wr.rdma.rkey = rkey;
    s->wr.wr.rdma.remote_addr = remote_addr;
    s->wr.imm_data = imm_data;
  }
}

void RdmaWrite(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr) {
  RemoteAccess(q, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

void RdmaWriteImm(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, __be32 imm_data) {
  RemoteAccess(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm_data);
}

void RdmaRead(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr) {
  RemoteAccess(q, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

void LocalInv(ibv_qp_ex* q, uint32_t invalidate_rkey) {
  if (StagedWr* s = Begin(q, IBV_WR_LOCAL_INV)) s->wr.invalidate_rkey = invalidate_rkey;
}

void BindMw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  StagedWr* s = Begin(q, IBV_WR_BIND_MW);
  if (s == nullptr) return;
  if (info == nullptr) {
    Fail(ToSim(q), EINVAL);
    return;
  }
  s->wr.bind_mw.mw = mw;
  s->wr.bind_mw.rkey = rkey;
  s->wr.bind_mw.bind_info = *info;
}

// Operations this NIC does not have: the batch fails with EOPNOTSUPP at ibv_wr_complete.
void AtomicCmpSwp(ibv_qp_ex* q, uint32_t, uint64_t, uint64_t, uint64_t) {
  Fail(ToSim(q), EOPNOTSUPP);
}
void AtomicFetchAdd(ibv_qp_ex* q, uint32_t, uint64_t, uint64_t) {
  Fail(ToSim(q), EOPNOTSUPP);
}
void AtomicWrite(ibv_qp_ex* q, uint32_t, uint64_t, const void*) {
  Fail(ToSim(q), EOPNOTSUPP);
}
void SendTso(ibv_qp_ex* q, void*, uint16_t, uint16_t) {
  Fail(ToSim(q), EOPNOTSUPP);
}
// The destination of the last request begun: checked with the rest at ibv_wr_complete.
void SetUdAddr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  StagedWr* s = Last(q);
  if (s == nullptr) return;
  if (q->qp_base.qp_type != IBV_QPT_UD) {
    Fail(ToSim(q), EINVAL);
    return;
  }
  s->wr.wr.ud.ah = ah;
  s->wr.wr.ud.remote_qpn = remote_qpn;
  s->wr.wr.ud.remote_qkey = remote_qkey;
}
void SetXrcSrqn(ibv_qp_ex* q, uint32_t) {
  Fail(ToSim(q), EOPNOTSUPP);
}

void SetSgeList(ibv_qp_ex* q, size_t num_sge, const ibv_sge* sg_list) {
  StagedWr* s = Last(q);
  if (s == nullptr) return;
  if (num_sge > ToSim(q)->max_send_sge || (num_sge > 0 && sg_list == nullptr)) {
    Fail(ToSim(q), EINVAL);
    return;
  }
  if (num_sge > 0) std::memcpy(s->sge, sg_list, num_sge * sizeof(ibv_sge));
  s->wr.num_sge = int(num_sge);
  s->wr.send_flags &= ~unsigned(IBV_SEND_INLINE);
}

void SetSge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  SetSgeList(q, 1, &sge);
}

// Inline data is copied now: the caller may reuse its buffers as soon as the call returns.
void SetInlineDataList(ibv_qp_ex* q, size_t num_buf, const ibv_data_buf* buf_list) {
  StagedWr* s = Last(q);
  if (s == nullptr) return;
  SimQp* qp = ToSim(q);
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) total += buf_list[i].length;
  if (total > qp->max_inline_data) {
    Fail(qp, EINVAL);
    return;
  }
  size_t off = 0;
  for (size_t i = 0; i < num_buf; ++i) {
    if (buf_list[i].length > 0)
      std::memcpy(s->inline_data + off, buf_list[i].addr, buf_list[i].length);
    off += buf_list[i].length;
  }
  s->inline_length = uint32_t(total);
  s->wr.num_sge = 1;
  s->wr.send_flags |= IBV_SEND_INLINE;
}

void SetInlineData(ibv_qp_ex* q, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  SetInlineDataList(q, 1, &buf);
}

void Start(ibv_qp_ex* q) {
  SimQp* qp = ToSim(q);
  qp->send_mu.lock();  // held until complete or abort (ibv_wr_post(3))
  qp->batch.clear();
  qp->batch_error = 0;
}

// Points a staged request at its own scatter list: the batch vector may have moved since.
void Link(StagedWr& s) {
  if (s.wr.send_flags & IBV_SEND_INLINE) {
    s.sge[0] = ibv_sge{uint64_t(uintptr_t(s.inline_data)), s.inline_length, 0};
  }
  s.wr.sg_list = s.sge;
  s.wr.next = nullptr;
}

int Complete(ibv_qp_ex* q) {
  SimQp* qp = ToSim(q);
  int rc = qp->batch_error;
  if (rc == 0 && !SendQueueAccepts(*qp)) rc = EINVAL;
  const uint64_t first = qp->sq_posted.load(std::memory_order_relaxed);
  // All or nothing: every request is checked before any is written.
  for (size_t i = 0; rc == 0 && i < qp->batch.size(); ++i) {
    Link(qp->batch[i]);
    rc = SendQueueFull(*qp, first + i) ? ENOMEM : CheckSendWr(*qp, qp->batch[i].wr);
  }
  if (rc == 0 && !qp->batch.empty()) {
    for (size_t i = 0; i < qp->batch.size(); ++i) WriteSendWqe(qp, first + i, qp->batch[i].wr);
    PublishSendWqes(qp, first + qp->batch.size());
  }
  qp->batch.clear();
  qp->send_mu.unlock();
  return rc;
}

void Abort(ibv_qp_ex* q) {
  SimQp* qp = ToSim(q);
  qp->batch.clear();
  qp->send_mu.unlock();
}

ibv_qp* CreateQpExOp(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  if (attr == nullptr || (attr->comp_mask & ~kKnownQpCompMask) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  const uint64_t supported_ops =
      attr->qp_type == IBV_QPT_UD ? kSupportedUdSendOps : kSupportedSendOps;
  const bool unsupported =
      (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UD) ||
      (attr->comp_mask & kUnsupportedCompMask) != 0 ||
      ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags != 0) ||
      ((attr->comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && attr->max_tso_header != 0) ||
      ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
       (attr->send_ops_flags & ~supported_ops) != 0);
  if (unsupported) {
    errno = EOPNOTSUPP;  // the simnic implements RC and UD, with the operations above
    return nullptr;
  }
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr ||
      attr->pd->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  return CreateQp(attr->pd, reinterpret_cast<ibv_qp_init_attr*>(attr), attr);
}

}  // namespace

void FillWrOps(ibv_qp_ex* q) {
  q->wr_atomic_cmp_swp = AtomicCmpSwp;
  q->wr_atomic_fetch_add = AtomicFetchAdd;
  q->wr_bind_mw = BindMw;
  q->wr_local_inv = LocalInv;
  q->wr_rdma_read = RdmaRead;
  q->wr_rdma_write = RdmaWrite;
  q->wr_rdma_write_imm = RdmaWriteImm;
  q->wr_send = Send;
  q->wr_send_imm = SendImm;
  q->wr_send_inv = SendInv;
  q->wr_send_tso = SendTso;
  q->wr_set_ud_addr = SetUdAddr;
  q->wr_set_xrc_srqn = SetXrcSrqn;
  q->wr_set_inline_data = SetInlineData;
  q->wr_set_inline_data_list = SetInlineDataList;
  q->wr_set_sge = SetSge;
  q->wr_set_sge_list = SetSgeList;
  q->wr_start = Start;
  q->wr_complete = Complete;
  q->wr_abort = Abort;
  q->wr_atomic_write = AtomicWrite;
}

void InitQpExOps(SimContext* c) {
  c->vctx.create_qp_ex = CreateQpExOp;
}

}  // namespace bx::simnic

extern "C" {

// Only a QP created with send-ops flags is extended (as in the providers); others give NULL.
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (qp == nullptr || !bx::simnic::IsSimContext(qp->context)) return nullptr;
  bx::simnic::SimQp* sim = bx::simnic::ToSim(qp);
  return sim->extended ? &sim->qp_ex : nullptr;
}

}  // extern "C"
