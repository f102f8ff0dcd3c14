// bx_observe: what the engine, the transports, the RPC layer and the parameter server already
// count, published in the metrics registry (include/bx/metrics.h) without touching them. Each
// Export* call registers a collector that reads the object's own counters (GetRdmaTransportInfo,
// Socket::counters(), Client::stats(), Server::stats(), PsServer::counters()) when /metrics is
// scraped, and returns the handle that keeps it registered. The metric names are listed in
// docs/HARDENING.md ("Metrics").
//
// Part of libbexpress; in the source tree it is the bx_observe layer (src/observe/), above
// transport, rpc and ps.
//
// Lifetime: the exported object must outlive the handle; destroy (or Reset) the handle first.
// Destroying a handle waits for a scrape that is running its collector.
//
// Threads: Export* and handle destruction may be called from any thread except a transport I/O
// thread or an RPC/PS callback (which runs on one): a scrape holds the registry lock while it
// reads an rdma transport, which runs a closure on each engine's I/O thread and waits for it, so
// an I/O thread waiting for the registry lock would deadlock with it. For the same reason, do
// not scrape (Registry::ExposeText) from an I/O thread. Collectors read only through the
// objects' thread-safe accessors and never record into the registry themselves.
//
// Labels: each Export* adds the caller's `labels` to every series it writes; give every exported
// object distinct labels (e.g. {{"role", "client"}} and {{"role", "server"}} for two transports
// in one process), or the exposition holds duplicate series. The label names the exporters add
// themselves (peer, engine, side, method, quantile, code, replica, state, role) must not be
// among them.
#pragma once

#include <memory>
#include <vector>

#include "bx/export.h"
#include "bx/metrics.h"
#include "bx/rpc.h"
#include "bx/status.h"
#include "bx/transport.h"

namespace bx::ps {
class PsServer;
class PsClient;
}  // namespace bx::ps

namespace bx::observe {

using metrics::CollectorHandle;
using metrics::Labels;
using metrics::Registry;

// An rdma:// transport: every engine's counters as bx_engine_<counter>_total, its level values
// (sockets_on_engine, channels_open, max_outstanding_bytes, window_bytes, in_thread_domain) as
// bx_engine_<name> gauges, each with labels peer, side (initiator/acceptor) and engine (index
// among this transport's live engines to that peer and side); and bx_rdma_engines,
// bx_rdma_io_threads, bx_rdma_thread_domains, bx_rdma_parent_domains gauges. An engine's series
// exist while it does. InvalidArgument when `transport` is not rdma://.
BX_EXPORT Result<CollectorHandle> ExportRdmaTransport(Transport& transport, Labels labels = {},
                                                      Registry& registry = Registry::Default());

// bemalloc, the registered-memory pool, per NIC it registers on (label `device`: the device's
// name, "host" when the process is TCP-only): bx_bemalloc_registered_bytes, _regions,
// _empty_region_bytes and _budget_bytes (0: no budget) gauges; bx_bemalloc_registrations_total,
// _deregistrations_total, _registration_failures_total and _budget_refusals_total counters.
// A process registers on one device today, so there is one series of each.
BX_EXPORT CollectorHandle ExportRegisteredMemory(Labels labels = {},
                                                 Registry& registry = Registry::Default());

// One socket of either transport: Socket::counters() as bx_socket_<counter>_total with a peer
// label (for the few sockets an operator cares about; the engines already count rdma traffic).
BX_EXPORT CollectorHandle ExportSocket(Socket& socket, Labels labels = {},
                                       Registry& registry = Registry::Default());

// An RPC client: calls, outcomes by status code, attempts, retries, fallbacks, replica state
// changes, connections, heartbeats, per-replica state and load, and call latency per method.
BX_EXPORT CollectorHandle ExportRpcClient(const rpc::Client& client, Labels labels = {},
                                          Registry& registry = Registry::Default());

// An RPC server: requests, executions, drops, unknown methods, heartbeats, connections and
// handler latency per method.
BX_EXPORT CollectorHandle ExportRpcServer(const rpc::Server& server, Labels labels = {},
                                          Registry& registry = Registry::Default());

// A parameter-server replica: bx_ps_server_* counters, its replica's role, epoch, lsn and live
// backups, and the bx_rpc_server_* metrics of the rpc::Server inside it.
BX_EXPORT CollectorHandle ExportPsServer(ps::PsServer& server, Labels labels = {},
                                         Registry& registry = Registry::Default());

// A parameter-server client: bx_ps_client_push_failovers_total and the bx_rpc_client_* metrics
// summed over its rpc::Clients (without the per-replica series, which would repeat a replica
// once per client that knows it).
BX_EXPORT CollectorHandle ExportPsClient(const ps::PsClient& client, Labels labels = {},
                                         Registry& registry = Registry::Default());

// Several handles kept together (what a command exports); destroying it unregisters them all.
class BX_EXPORT Exports {
 public:
  void Add(CollectorHandle handle) { handles_.push_back(std::move(handle)); }
  // Keeps the handle or returns the error.
  Status Add(Result<CollectorHandle> handle);
  void Clear() { handles_.clear(); }
  size_t size() const { return handles_.size(); }

 private:
  std::vector<CollectorHandle> handles_;
};

}  // namespace bx::observe
