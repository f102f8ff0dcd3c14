// ibv_create_cq_ex and the extended CQ's polling interface (ibv_create_cq_ex(3)). start_poll takes
// the CQ's poll lock and shows its oldest CQE; next_poll consumes the CQE shown and shows the
// next; end_poll consumes the last CQE shown and releases the lock. The ibv_wc_read_* readers
// read the CQE shown, and only those the CQ was created with are there (as in the providers).
#include <cerrno>

#include "simnic/verbs_internal.h"

namespace bx::simnic {
namespace {

// What a CQE of this NIC carries. Timestamps, VLANs, flow tags and tag matching are not.
constexpr uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS;
constexpr uint32_t kKnownCqCompMask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
// A single-threaded CQ may skip its lock; this one keeps it. Ignoring overruns is not supported:
// the ring would overwrite CQEs the application has not read.
constexpr uint32_t kSupportedCreateFlags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;

SimCq* ToSim(ibv_cq_ex* c) {
  return reinterpret_cast<SimCq*>(c);
}

const ibv_wc& Shown(ibv_cq_ex* c) {
  return ToSim(c)->current->wc;
}

void Show(SimCq* cq, const CqEntry* e) {
  cq->current = e;
  cq->cq_ex.wr_id = e->wc.wr_id;
  cq->cq_ex.status = e->wc.status;
}

// Consumes the CQE shown, if any.
void ConsumeShown(SimCq* cq) {
  if (cq->current == nullptr) return;
  RetireCqe(*cq->current);
  cq->current = nullptr;
  ++cq->poll_head;
}

int StartPoll(ibv_cq_ex* ibcq, ibv_poll_cq_attr* attr) {
  SimCq* cq = ToSim(ibcq);
  if (attr == nullptr || attr->comp_mask != 0) return EINVAL;
  // An overrun lost CQEs; IBV_EVENT_CQ_ERR said so (ibv_poll_cq fails the same way).
  if (cq->broken.load(std::memory_order_acquire)) return EOVERFLOW;
  LockPoll(cq);
  uint64_t head = cq->head.load(std::memory_order_relaxed);
  const CqEntry* e = NextCqe(cq, head);
  if (e == nullptr) {
    cq->head.store(head, std::memory_order_release);
    UnlockPoll(cq, false);
    return ENOENT;  // and the caller must not call end_poll (but may: see EndPoll)
  }
  cq->poll_head = head;
  cq->polling.store(true, std::memory_order_relaxed);
  Show(cq, e);
  return 0;
}

int NextPoll(ibv_cq_ex* ibcq) {
  SimCq* cq = ToSim(ibcq);
  if (!cq->polling.load(std::memory_order_relaxed)) return EINVAL;
  ConsumeShown(cq);
  const CqEntry* e = NextCqe(cq, cq->poll_head);
  if (e == nullptr) return ENOENT;
  Show(cq, e);
  return 0;
}

void EndPoll(ibv_cq_ex* ibcq) {
  SimCq* cq = ToSim(ibcq);
  // pyverbs' tests call end_poll after a start_poll that found nothing; that must not release
  // a lock this thread does not hold.
  if (!cq->polling.load(std::memory_order_relaxed)) return;
  ConsumeShown(cq);
  cq->head.store(cq->poll_head, std::memory_order_release);
  cq->polling.store(false, std::memory_order_relaxed);
  UnlockPoll(cq, true);
}

enum ibv_wc_opcode ReadOpcode(ibv_cq_ex* c) {
  return Shown(c).opcode;
}
uint32_t ReadVendorErr(ibv_cq_ex* c) {
  return Shown(c).vendor_err;
}
unsigned int ReadWcFlags(ibv_cq_ex* c) {
  return Shown(c).wc_flags;
}
uint32_t ReadByteLen(ibv_cq_ex* c) {
  return Shown(c).byte_len;
}
__be32 ReadImmData(ibv_cq_ex* c) {
  return Shown(c).imm_data;  // or, for IBV_WC_WITH_INV, the invalidated rkey (a union)
}
uint32_t ReadQpNum(ibv_cq_ex* c) {
  return Shown(c).qp_num;
}
uint32_t ReadSrcQp(ibv_cq_ex* c) {
  return Shown(c).src_qp;
}
uint32_t ReadSlid(ibv_cq_ex* c) {
  return Shown(c).slid;
}
uint8_t ReadSl(ibv_cq_ex* c) {
  return Shown(c).sl;
}
uint8_t ReadDlidPathBits(ibv_cq_ex* c) {
  return Shown(c).dlid_path_bits;
}

void FillPollOps(ibv_cq_ex* c, uint64_t wc_flags) {
  c->start_poll = StartPoll;
  c->next_poll = NextPoll;
  c->end_poll = EndPoll;
  c->read_opcode = ReadOpcode;
  c->read_vendor_err = ReadVendorErr;
  c->read_wc_flags = ReadWcFlags;
  if (wc_flags & IBV_WC_EX_WITH_BYTE_LEN) c->read_byte_len = ReadByteLen;
  if (wc_flags & IBV_WC_EX_WITH_IMM) c->read_imm_data = ReadImmData;
  if (wc_flags & IBV_WC_EX_WITH_QP_NUM) c->read_qp_num = ReadQpNum;
  if (wc_flags & IBV_WC_EX_WITH_SRC_QP) c->read_src_qp = ReadSrcQp;
  if (wc_flags & IBV_WC_EX_WITH_SLID) c->read_slid = ReadSlid;
  if (wc_flags & IBV_WC_EX_WITH_SL) c->read_sl = ReadSl;
  if (wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS) c->read_dlid_path_bits = ReadDlidPathBits;
}

ibv_cq_ex* CreateCqExOp(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr == nullptr || (attr->comp_mask & ~kKnownCqCompMask) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  const uint32_t flags = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? attr->flags : 0;
  if ((attr->wc_flags & ~kSupportedWcFlags) != 0 || (flags & ~kSupportedCreateFlags) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // A CQ may name a parent domain, whose allocators a provider would use for the ring; this
  // NIC's rings live in its own memory, so only the domain's validity matters.
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
      (attr->parent_domain == nullptr || attr->parent_domain->context != context ||
       !bx::simnic::ToSim(attr->parent_domain)->is_parent_domain)) {
    errno = EINVAL;
    return nullptr;
  }
  SimCq* cq =
      CreateCq(context, int(attr->cqe), attr->cq_context, attr->channel, int(attr->comp_vector));
  if (cq == nullptr) return nullptr;
  FillPollOps(&cq->cq_ex, attr->wc_flags);
  return &cq->cq_ex;
}

}  // namespace

void InitCqExOps(SimContext* c) {
  c->vctx.create_cq_ex = CreateCqExOp;
}

}  // namespace bx::simnic
