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

}  // namespace bx::simnic
