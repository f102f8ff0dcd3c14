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

}  // namespace bx::simnic
