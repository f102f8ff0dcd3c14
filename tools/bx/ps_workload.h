// What `bx demo` (demo_command.cc, which defines these) shares with `bx ps` (ps_command.cc).
#pragma once

#include <memory>
#include <string>

#include "bx/metrics.h"
#include "bx/ps/cluster.h"

namespace bx::tools {

// `bx ps rank` / `bx ps train`: the demo's ranking or training workload against a cluster that
// runs elsewhere, described by `spec`, over `scheme` ("rdma" or "tcp").
void RunPsWorkload(const ps::ClusterSpec& spec, const std::string& scheme, bool training,
                   double seconds, int threads, bool json, int metrics_port,
                   int heartbeat_timeout_ms, const std::string& start_file);

// `--metrics-port`: serves the default registry's /metrics on `address`:`port` (nothing when
// `port` < 0) and says where on stderr.
std::unique_ptr<metrics::MetricsServer> StartMetricsEndpoint(int port, const std::string& address);

}  // namespace bx::tools
