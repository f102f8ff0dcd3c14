// The descriptors a listener may spend on connections that have not authenticated yet. Idle
// sockets that never authenticate must not use up the process's descriptors, or an accept fails
// for want of one and legitimate clients are locked out (with the open-file limit at 256, 400
// idle connections did that to every trainer). So each listener bounds its
// unauthenticated connections by a quarter of the process's limit, read once, after raising the
// soft limit to the hard one where allowed (as servers such as nginx and etcd do), and evicts
// the oldest such connection to make room for a new one.
//
// Threads: any.
#pragma once

#include <cstddef>

namespace bx::transport {

// Raises RLIMIT_NOFILE's soft limit to its hard limit (once per process) and returns the
// descriptors unauthenticated connections of one listener may hold: a quarter of the soft
// limit, at least 16, at most `cap` (the listener's own bound).
size_t UnauthenticatedDescriptorBudget(size_t cap);

}  // namespace bx::transport
