// Declarations shared by the files that implement the exported verbs.
#pragma once

#include "simnic/device.h"
#include "simnic/sim_objects.h"

namespace bx::simnic {

Device* FindDevice(ibv_device* d);
bool IsSimContext(ibv_context* c);
// Fills the context's ops table (post_send, post_recv, poll_cq, req_notify_cq).
void InitContextOps(SimContext* c);
// Fills the memory-window ops (alloc_mw, dealloc_mw, bind_mw) that the header's inlines call.
void InitMemoryWindowOps(SimContext* c);
// Fills post_srq_recv (verbs_srq.cc).
void InitSrqOps(SimContext* c);
// Hardware thread: takes the SRQ's oldest receive (false when it has none). *limit_reached when
// the take armed limit's event is due (the caller raises IBV_EVENT_SRQ_LIMIT_REACHED).
bool TakeSrqReceive(SimSrq* srq, RecvWqe* out, bool* limit_reached);
// Gives back a receive taken for a request that then failed before consuming it.
void ReturnSrqReceive(SimSrq* srq, const RecvWqe& wqe);

// The send path that ibv_post_send and the ibv_wr_* batches share (verbs_queues.cc), called under
// the QP's send_mu. A WQE is written at its ring index, then published with the ones before it.
bool SendQueueAccepts(const SimQp& qp);                   // the QP's state takes sends
bool SendQueueFull(const SimQp& qp, uint64_t index);      // no free slot for WQE `index`
int CheckSendWr(const SimQp& qp, const ibv_send_wr& wr);  // 0, or why the WR is refused
void WriteSendWqe(SimQp* qp, uint64_t index, const ibv_send_wr& wr);
void PublishSendWqes(SimQp* qp, uint64_t posted);  // hands WQEs up to `posted` to the hardware

// The completion path that ibv_poll_cq and the extended CQ's start/next/end_poll share.
void LockPoll(SimCq* cq);
// `found`: whether this poll returned anything (runs of empty polls yield the core).
void UnlockPoll(SimCq* cq, bool found);
// Under the poll lock: the CQE at `head`, after skipping those of destroyed QPs, or null.
const CqEntry* NextCqe(SimCq* cq, uint64_t& head);
// Frees the work-queue slots a polled CQE covers.
void RetireCqe(const CqEntry& e);
// Fills the extended-CQ and extended-QP creation ops (verbs_cq_ex.cc, verbs_qp_ex.cc).
void InitCqExOps(SimContext* c);
void InitQpExOps(SimContext* c);
// Fills an extended QP's ibv_wr_* functions (verbs_qp_ex.cc).
void FillWrOps(ibv_qp_ex* q);
// An address vector's destination as a fabric address (fe80::<pid>:<index>), or all zero when
// no device holds its GID or LID: requests to it go unanswered, as on a real fabric.
ibv_gid ResolveAddressVector(const ibv_ah_attr& av);
// Creates an RC or UD QP; `ext` when it came through ibv_create_qp_ex (verbs_queues.cc).
ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* init, const ibv_qp_init_attr_ex* ext);
// Creates a CQ (ibv_create_cq, and ibv_create_cq_ex before it makes the CQ extended).
SimCq* CreateCq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                int comp_vector);

}  // namespace bx::simnic
