// The kernel-TCP transport (tcp://host:port): the baseline the RDMA transport is measured against
// and the fallback where RDMA cannot be used. Same Socket/Listener contract as rdma://.
//
// Data path: TransportOptions::io_threads epoll threads; sockets are non-blocking with
// TCP_NODELAY; each message is one frame (transport/tcp/frame.h), sent with one sendmsg of
// header + payload; large payloads are read by the kernel straight into a bemalloc Buffer.
// bemalloc::Init must have been called before messages are received.
//
// MSG_ZEROCOPY is not used. Its one benefit is skipping the send-side copy, and on loopback (the
// only network here) the kernel makes a deferred copy of every zero-copy packet looped to a local
// socket (Documentation/networking/msg_zerocopy.rst, "Loopback"), so it can only add the
// completion notifications; it is worth measuring again on a real NIC for messages >= 64 KiB.
#pragma once

#include <memory>

#include "bx/status.h"
#include "bx/transport.h"

namespace bx::tcp {

// A new transport with its I/O threads running. Destroying it ends every socket and listener it
// made: pending sends fail and on_close runs with Aborted("tcp transport shut down").
// Threads: Listen and Connect may be called from any thread; Connect blocks up to its timeout.
// The transport must not be destroyed from one of its own handlers (it joins its I/O threads).
Result<std::unique_ptr<Transport>> CreateTcpTransport(const TransportOptions& options);

// Registers "tcp" with transport::RegisterTransport (src/transport/transport_registry.h).
void RegisterTcpTransport();

}  // namespace bx::tcp
