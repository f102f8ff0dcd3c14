// The per-host settings an operator gives the rdma transport through environment variables,
// overriding what the program put in RdmaOptions. Kept apart from the transport so that the
// variables and their spellings are in one place (bx::ApplyRdmaEnvironment, in
// include/bx/transport.h, is the public face of the same code).
#pragma once

#include "bx/status.h"
#include "bx/transport.h"

namespace bx::rdma {

// BX_GID_INDEX, BX_TRAFFIC_CLASS and BX_SERVICE_LEVEL (as NCCL_IB_GID_INDEX, NCCL_IB_TC and
// NCCL_IB_SL), BX_POLLING and BX_SHARE_IO_THREADS, applied to `rdma`. InvalidArgument, naming
// the variable, for a value that cannot be used.
Status ApplyEnvironment(RdmaOptions& rdma);

// BX_DEBUG=1: one line per connection saying how it is addressed and why.
bool DebugAddressing();

}  // namespace bx::rdma
