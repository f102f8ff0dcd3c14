// rdma://host:port: the socket interface over engines (one RC QP per socket for now; QP
// multiplexing comes with the scheduler). Connection set-up runs the bootstrap handshake
// (bootstrap.h) over TCP; the bootstrap connection then stays open to detect peer death.
//
// Memory: messages are bemalloc Buffers, registered on bemalloc's device. The transport therefore
// runs on that device: the first RDMA transport of a process initialises bemalloc on its device
// (TransportOptions::device, else BX_DEVICE, else the first device) if nothing has yet; a later
// one asking for another device is refused, since its QPs could not use bemalloc's keys.
//
// Threads: as include/bx/transport.h says. Listen/Connect block the calling thread for the
// handshake (bounded by the connect timeout, 5 s for accepted connections).
#pragma once

#include <memory>

#include "bx/transport.h"
#include "engine/engine.h"

namespace bx::rdma {

struct RdmaOptions {
  engine::EngineConfig engine;
  int busy_poll_us = 200;  // I/O thread polling before it sleeps
  // QP transport parameters (see verbs::RcOptions): ~67 ms ACK timeout, 7 retries; RNR retry 0,
  // since credits make RNR impossible and one would be a bug worth failing loudly on.
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 0;
};

Result<std::unique_ptr<Transport>> CreateRdmaTransport(const TransportOptions& options);
Result<std::unique_ptr<Transport>> CreateRdmaTransport(const TransportOptions& options,
                                                       const RdmaOptions& rdma);

// Makes "rdma" creatable through transport::CreateTransport.
void RegisterRdmaTransport();

}  // namespace bx::rdma
