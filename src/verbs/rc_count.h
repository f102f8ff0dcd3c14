// How many RC queue pairs this process holds (created by CreateRcQueuePair and not yet
// destroyed), over every transport and device: what a NIC keeps connection state for. Its own
// header so that the few readers (bx's --metrics-port) do not rebuild rc_connect.h's includers.
#pragma once

#include <cstdint>

namespace bx::verbs {

int64_t LiveRcQueuePairs();

}  // namespace bx::verbs
