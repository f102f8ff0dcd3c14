// Shared receive queues (ibv_create_srq(3), ibv_modify_srq(3), ibv_post_srq_recv(3)): one queue
// of receives that every RC QP created with it consumes, in the order they were posted. What
// each call checks follows the man pages:
//   create   max_wr 1..kMaxQpWr, max_sge <= kMaxSge (the granted values are written back);
//            srq_limit is ignored, as on most devices.
//   modify   IBV_SRQ_MAX_WR resizes (not below the WQEs in use: EINVAL); IBV_SRQ_LIMIT arms the
//            limit event (limit <= max_wr). When a receive is taken and fewer than `limit`
//            remain, IBV_EVENT_SRQ_LIMIT_REACHED is raised once and the limit disarms.
//   post     ENOMEM once max_wr WQEs are in use (posted and their completions not yet polled),
//            EINVAL for too many SGEs; a chain stops at the failing request (*bad_wr).
//   destroy  EBUSY while a QP uses it.
// The responder takes receives (rc_responder.cc); a QP that uses an SRQ and enters the error
// state raises IBV_EVENT_QP_LAST_WQE_REACHED once and flushes none of the SRQ's receives.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "simnic/fabric.h"
#include "simnic/verbs_internal.h"

namespace bx::simnic {
namespace {

int PostSrqRecv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  SimSrq* srq = ToSim(ibsrq);
  std::lock_guard lock(srq->mu);
  int rc = 0;
  for (; wr != nullptr; wr = wr->next) {
    if (srq->used.load(std::memory_order_acquire) >= srq->max_wr) {
      rc = ENOMEM;
      break;
    }
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > srq->max_sge) {
      rc = EINVAL;
      break;
    }
    RecvWqe wqe{};
    wqe.wr_id = wr->wr_id;
    wqe.num_sge = wr->num_sge;
    if (wr->num_sge > 0) std::memcpy(wqe.sge, wr->sg_list, sizeof(ibv_sge) * size_t(wr->num_sge));
    srq->queue.push_back(wqe);
    srq->used.fetch_add(1, std::memory_order_acq_rel);
  }
  if (rc != 0) *bad_wr = wr;
  return rc;
}

}  // namespace

void InitSrqOps(SimContext* c) {
  c->vctx.context.ops.post_srq_recv = PostSrqRecv;
}

bool TakeSrqReceive(SimSrq* srq, RecvWqe* out, bool* limit_reached) {
  std::lock_guard lock(srq->mu);
  if (srq->queue.empty()) return false;
  *out = srq->queue.front();
  srq->queue.pop_front();
  *limit_reached = srq->limit != 0 && srq->queue.size() < srq->limit;
  if (*limit_reached) srq->limit = 0;  // one event per arming
  return true;
}

void ReturnSrqReceive(SimSrq* srq, const RecvWqe& wqe) {
  std::lock_guard lock(srq->mu);
  srq->queue.push_front(wqe);
}

}  // namespace bx::simnic

using namespace bx::simnic;

extern "C" {

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  if (pd == nullptr || init == nullptr || init->attr.max_wr == 0 ||
      init->attr.max_wr > uint32_t(kMaxQpWr) || init->attr.max_sge > uint32_t(kMaxSge)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* srq = new SimSrq{};
  srq->protection_domain = Protection(pd);
  srq->context = ToSim(pd->context);
  srq->max_wr = init->attr.max_wr;
  srq->max_sge = std::max<uint32_t>(init->attr.max_sge, 1);
  init->attr.max_sge = srq->max_sge;  // what was granted, as providers report it
  ibv_srq& s = srq->srq;
  s.context = pd->context;
  s.srq_context = init->srq_context;
  s.pd = pd;
  s.handle = uint32_t(reinterpret_cast<uintptr_t>(srq) >> 4);
  pthread_mutex_init(&s.mutex, nullptr);
  pthread_cond_init(&s.cond, nullptr);
  srq->protection_domain->users.fetch_add(1);
  return &s;
}

int ibv_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  SimSrq* srq = ToSim(ibsrq);
  if (attr == nullptr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) != 0) return EINVAL;
  std::lock_guard lock(srq->mu);
  const uint32_t max_wr = (mask & IBV_SRQ_MAX_WR) ? attr->max_wr : srq->max_wr;
  if (max_wr == 0 || max_wr > uint32_t(kMaxQpWr) ||
      max_wr < srq->used.load(std::memory_order_acquire)) {
    return EINVAL;
  }
  if ((mask & IBV_SRQ_LIMIT) && attr->srq_limit > max_wr) return EINVAL;
  srq->max_wr = max_wr;
  if (mask & IBV_SRQ_LIMIT) srq->limit = attr->srq_limit;
  return 0;
}

int ibv_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  SimSrq* srq = ToSim(ibsrq);
  std::lock_guard lock(srq->mu);
  attr->max_wr = srq->max_wr;
  attr->max_sge = srq->max_sge;
  attr->srq_limit = srq->limit;
  return 0;
}

int ibv_destroy_srq(ibv_srq* ibsrq) {
  SimSrq* srq = ToSim(ibsrq);
  if (srq->users.load() > 0) return EBUSY;
  srq->protection_domain->users.fetch_sub(1);
  pthread_mutex_destroy(&ibsrq->mutex);
  pthread_cond_destroy(&ibsrq->cond);
  delete srq;
  return 0;
}

}  // extern "C"
