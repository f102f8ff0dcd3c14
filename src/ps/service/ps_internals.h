// The implementations behind the public parameter-server classes (include/bx/ps/), for the
// library's own layers (metrics export) and tests. Not installed: a user reaches a server, a
// client or a monitor only through what the public headers declare.
#pragma once

#include "bx/ps/client.h"
#include "bx/ps/server.h"
#include "ps/service/ps_service.h"

namespace bx::ps {

class PsInternals {
 public:
  static PsServerCore& Core(PsServer& server) { return *server.core_; }
  static PsClientCore& Core(PsClient& client) { return *client.core_; }
  static const PsClientCore& Core(const PsClient& client) { return *client.core_; }
  // The lease-less detector's state; null for a monitor with a configuration store, whose
  // state is its LeasedFailoverCore's.
  static const FailoverMonitorCore* Core(const FailoverMonitor& monitor) {
    return monitor.core_.get();
  }
};

}  // namespace bx::ps
