// The exporters of observe.h: each is a registry collector that reads an object's counters at
// scrape time and writes them under Prometheus names.
#include "bx/observe.h"

#include <array>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "alloc/verbs_registrar.h"
#include "bx/bemalloc.h"
#include "ps/service/ps_internals.h"
#include "ps/service/ps_service.h"
#include "transport/rdma/rdma_transport.h"

namespace bx::observe {
namespace {

using metrics::SampleWriter;

Labels With(Labels base, std::initializer_list<std::pair<std::string, std::string>> more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// ---------------------------------------------------------------------------------------------
// Engine counters (EngineCounters::ToMap() plus what RdmaConnection adds). Keys not listed here
// (added to the engine later) are exported as counters with a generic help text.

struct EngineKey {
  std::string_view key;
  bool gauge;
  std::string_view help;
};

constexpr std::array kEngineKeys = {
    EngineKey{"messages_sent", false, "Messages this engine sent."},
    EngineKey{"bytes_sent", false, "Payload bytes this engine sent."},
    EngineKey{"messages_received", false, "Messages this engine received."},
    EngineKey{"bytes_received", false, "Payload bytes this engine received."},
    EngineKey{"messages_dropped", false,
              "Messages that arrived for a channel already closed here (dropped)."},
    EngineKey{"channels_open", true, "Channels (sockets) open on this engine now."},
    EngineKey{"channels_opened", false, "Channels opened on this engine."},
    EngineKey{"eager_sent", false, "Messages sent eagerly (in a receive buffer)."},
    EngineKey{"rendezvous_exchanges", false, "Messages sent by rendezvous (remote write)."},
    EngineKey{"remote_writes", false, "Writes into known remote buffers (no rendezvous)."},
    EngineKey{"fragments", false, "Rendezvous fragments posted."},
    EngineKey{"credit_stalls", false, "Sends that waited for a receive credit."},
    EngineKey{"credit_updates_sent", false, "Credit updates sent to the peer."},
    EngineKey{"credits_received", false, "Receive credits returned by the peer."},
    EngineKey{"window_stalls", false, "Requests that waited for the send window."},
    EngineKey{"max_outstanding_bytes", true, "Largest number of bytes in flight seen."},
    EngineKey{"window_bytes", true, "Send window W in bytes (0: off)."},
    EngineKey{"scheduler_rounds", false, "Scheduler rounds over the channels."},
    EngineKey{"signalled_completions", false, "Signalled send completions."},
    EngineKey{"receive_batches_posted", false, "ibv_post_recv batches."},
    EngineKey{"batches_posted", false, "ibv_post_send batches (doorbells)."},
    EngineKey{"requests_posted", false, "Work requests posted to the send queue."},
    EngineKey{"rnr_events", false, "RNR-retry-exceeded completions (credits should keep it 0)."},
    EngineKey{"sockets_on_engine", true, "Sockets multiplexed on this engine now."},
};

const EngineKey* FindEngineKey(std::string_view key) {
  for (const EngineKey& k : kEngineKeys)
    if (k.key == key) return &k;
  return nullptr;
}

void WriteRdma(SampleWriter& w, const rdma::RdmaTransportInfo& info, const Labels& labels) {
  w.Gauge("bx_rdma_engines", "Engines (RC QPs) of this rdma transport.", labels,
          double(info.engines.size()));
  w.Gauge("bx_rdma_io_threads", "I/O threads of this rdma transport.", labels,
          double(info.io_threads));
  w.Gauge("bx_rdma_thread_domains", "I/O threads that got a thread domain from the device.", labels,
          double(info.thread_domains));
  w.Gauge("bx_rdma_parent_domains", "I/O threads whose thread domain has a parent domain.", labels,
          double(info.parent_domains));
  // bx_rdma_io_busy_polls_total, ..._empty_polls_, _yields_, _sleeps_, _cq_wakeups_,
  // _task_wakeups_total: what the I/O threads' polling costs.
  for (const auto& [key, value] : info.io_loop.ToMap()) {
    w.Counter("bx_rdma_" + key + "_total",
              "I/O thread loop passes and sleeps of this rdma transport (" + key + ").", labels,
              double(value));
  }
  std::map<std::pair<std::string, bool>, int> next_index;  // (peer, initiator) -> engines seen
  for (const rdma::RdmaEngineInfo& e : info.engines) {
    int index = next_index[{e.peer, e.initiator}]++;
    Labels l = With(labels, {{"peer", e.peer},
                             {"side", e.initiator ? "initiator" : "acceptor"},
                             {"engine", std::to_string(index)}});
    w.Gauge("bx_engine_in_thread_domain",
            "1 when the engine's QP was created in its I/O thread's parent domain.", l,
            e.in_thread_domain ? 1 : 0);
    for (const auto& [key, value] : e.counters) {
      const EngineKey* known = FindEngineKey(key);
      if (known != nullptr && known->gauge) {
        w.Gauge("bx_engine_" + key, known->help, l, double(value));
        continue;
      }
      std::string name = "bx_engine_" + key;
      if (!name.ends_with("_total")) name += "_total";
      std::string help =
          known != nullptr ? std::string(known->help) : "Engine counter " + key + ".";
      w.Counter(name, help, l, double(value));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Latency: rpc::LatencyHistogram keeps its buckets private and a collector can write only
// counters and gauges, so a latency is exported summary-style: the quantile gauges
// <name>{quantile="0.5|0.9|0.99|0.999"} (bucket upper edges, < 9% error), <name>_count and
// <name>_sum counters (rate(_sum)/rate(_count) is the mean over a window), <name>_max gauge.

constexpr std::array<std::pair<double, std::string_view>, 4> kQuantiles = {
    {{0.5, "0.5"}, {0.9, "0.9"}, {0.99, "0.99"}, {0.999, "0.999"}}};

void WriteLatency(SampleWriter& w, const std::string& name, std::string_view what,
                  const Labels& labels, const rpc::LatencyHistogram& h) {
  std::string help(what);
  for (const auto& [q, text] : kQuantiles) {
    w.Gauge(name, help + ", quantiles since start (seconds)",
            With(labels, {{"quantile", std::string(text)}}), h.PercentileUs(q) / 1e6);
  }
  w.Counter(name + "_count", help + ": observations", labels, double(h.count()));
  w.Counter(name + "_sum", help + ": total seconds", labels, h.MeanUs() * double(h.count()) / 1e6);
  w.Gauge(name + "_max", help + ": largest seen (seconds)", labels, h.MaxUs() / 1e6);
}

// ---------------------------------------------------------------------------------------------
// RPC.

void WriteClientStats(SampleWriter& w, const rpc::ClientStats& s, const Labels& labels,
                      bool replicas) {
  w.Counter("bx_rpc_client_calls_total", "Calls started (Call() invocations).", labels,
            double(s.calls));
  w.Counter("bx_rpc_client_calls_ok_total", "Calls that finished with a response.", labels,
            double(s.ok));
  // Every error code a call can end with, also at 0, so a rate over a new error is defined.
  std::map<StatusCode, uint64_t> errors = s.errors;
  for (StatusCode code : {StatusCode::kDeadlineExceeded, StatusCode::kUnavailable,
                          StatusCode::kAborted, StatusCode::kInternal})
    errors.try_emplace(code, 0);
  for (const auto& [code, n] : errors) {
    w.Counter("bx_rpc_client_errors_total", "Calls that finished with an error, by status code.",
              With(labels, {{"code", std::string(StatusCodeName(code))}}), double(n));
  }
  w.Counter("bx_rpc_client_attempts_total", "Requests sent (first tries and retries).", labels,
            double(s.attempts));
  w.Counter("bx_rpc_client_retries_total", "Retries sent.", labels, double(s.retries));
  w.Counter("bx_rpc_client_retries_throttled_total", "Retries refused by the retry budget.", labels,
            double(s.retries_throttled));
  w.Counter("bx_rpc_fallbacks_to_tcp_total", "Replica connections moved from rdma to tcp.", labels,
            double(s.fallbacks_to_tcp));
  w.Counter("bx_rpc_returns_to_rdma_total", "Replica connections moved back from tcp to rdma.",
            labels, double(s.returns_to_rdma));
  w.Counter("bx_rpc_client_replica_state_changes_total", "Replica moves between up and down.",
            labels, double(s.replica_state_changes));
  w.Counter("bx_rpc_client_connections_opened_total", "Connections opened to replicas.", labels,
            double(s.connections_opened));
  w.Counter("bx_rpc_client_connections_failed_total",
            "Connections declared dead or closed by an error.", labels,
            double(s.connections_failed));
  w.Counter("bx_rpc_client_heartbeats_sent_total", "Heartbeats sent.", labels,
            double(s.heartbeats_sent));
  w.Counter("bx_rpc_client_timer_wakeups_total",
            "Times the client's timer thread woke (heartbeats, probes, deadlines, retries).",
            labels, double(s.timer_wakeups));
  for (const auto& [method, h] : s.latency) {
    WriteLatency(w, "bx_rpc_client_call_latency_seconds", "Successful call latency",
                 With(labels, {{"method", method}}), h);
  }
  if (!replicas) return;
  for (const rpc::ReplicaInfo& r : s.replicas) {
    Labels l = With(labels, {{"replica", r.address.ToString()}});
    for (rpc::ReplicaState state :
         {rpc::ReplicaState::kConnecting, rpc::ReplicaState::kUp, rpc::ReplicaState::kDown}) {
      w.Gauge("bx_rpc_client_replica_state", "1 for the replica's current state, else 0.",
              With(l, {{"state", std::string(rpc::ReplicaStateName(state))}}),
              r.state == state ? 1 : 0);
    }
    w.Gauge("bx_rpc_client_replica_on_tcp_fallback", "1 while the replica is used over tcp.", l,
            r.on_tcp_fallback ? 1 : 0);
    w.Gauge("bx_rpc_client_replica_outstanding", "Calls outstanding at the replica.", l,
            double(r.outstanding));
    w.Counter("bx_rpc_client_replica_attempts_total", "Requests sent to the replica.", l,
              double(r.calls));
  }
}

void WriteServerStats(SampleWriter& w, const rpc::ServerStats& s, const Labels& labels) {
  w.Counter("bx_rpc_server_requests_total", "Request frames received.", labels, double(s.requests));
  w.Counter("bx_rpc_server_executed_total", "Handlers started.", labels, double(s.executed));
  w.Counter("bx_rpc_server_dropped_expired_total",
            "Requests not executed because their deadline had passed.", labels,
            double(s.dropped_expired));
  w.Counter("bx_rpc_server_late_responses_total",
            "Responses not sent because the caller had given up.", labels,
            double(s.late_responses));
  w.Counter("bx_rpc_server_responses_refused_total",
            "Responses the transport refused (too large, or the send queue full); the caller got "
            "a ResourceExhausted answer instead.",
            labels, double(s.responses_refused));
  w.Counter("bx_rpc_server_refused_busy_total",
            "Requests answered ResourceExhausted because the worker queue was full "
            "(max_queued_request_bytes).",
            labels, double(s.refused_busy));
  w.Counter("bx_rpc_server_unknown_method_total", "Requests for a method not registered.", labels,
            double(s.unknown_method));
  w.Counter("bx_rpc_server_heartbeats_total", "Heartbeats received.", labels, double(s.heartbeats));
  w.Counter("bx_rpc_server_connections_total", "Connections accepted since Start.", labels,
            double(s.connections));
  for (const auto& [method, h] : s.handler_latency) {
    WriteLatency(w, "bx_rpc_server_handler_latency_seconds", "Handler latency, start to response",
                 With(labels, {{"method", method}}), h);
  }
}

}  // namespace

// -----------------------------------------------------------------------------------------------

Result<CollectorHandle> ExportRdmaTransport(Transport& transport, Labels labels,
                                            Registry& registry) {
  // Refuse a transport that is not rdma:// now rather than exporting nothing later.
  BX_RETURN_IF_ERROR(rdma::GetRdmaTransportInfo(transport).status());
  return registry.AddCollector([&transport, labels = std::move(labels)](SampleWriter& w) {
    Result<rdma::RdmaTransportInfo> info = rdma::GetRdmaTransportInfo(transport);
    if (info.ok()) WriteRdma(w, *info, labels);
  });
}

CollectorHandle ExportRegisteredMemory(Labels labels, Registry& registry) {
  return registry.AddCollector([labels = std::move(labels)](SampleWriter& w) {
    if (!bemalloc::IsInitialized()) return;
    const verbs::Device* device = bemalloc::RegisteredDevice();
    const Labels l = With(labels, {{"device", device != nullptr ? device->name() : "host"}});
    const bemalloc::Counters c = bemalloc::GetCounters();
    w.Gauge("bx_bemalloc_registered_bytes", "Bytes bemalloc keeps registered with the NIC.", l,
            double(c.registered_bytes));
    w.Gauge("bx_bemalloc_regions", "Registered regions.", l, double(c.regions));
    w.Gauge("bx_bemalloc_empty_region_bytes", "Registered bytes in regions with nothing allocated.",
            l, double(c.empty_region_bytes));
    w.Gauge("bx_bemalloc_budget_bytes", "The registered-memory budget (0: none).", l,
            double(c.budget_bytes));
    w.Counter("bx_bemalloc_registrations_total", "Regions registered.", l, double(c.registrations));
    w.Counter("bx_bemalloc_deregistrations_total", "Regions deregistered.", l,
              double(c.deregistrations));
    w.Counter("bx_bemalloc_registration_failures_total", "Registrations the NIC refused.", l,
              double(c.registration_failures));
    w.Counter("bx_bemalloc_budget_refusals_total",
              "Regions not registered because of the budget (the allocation failed).", l,
              double(c.budget_refusals));
  });
}

CollectorHandle ExportSocket(Socket& socket, Labels labels, Registry& registry) {
  return registry.AddCollector([&socket, labels = std::move(labels)](SampleWriter& w) {
    Labels l = With(labels, {{"peer", socket.peer()}});
    for (const auto& [key, value] : socket.counters()) {
      std::string name = "bx_socket_" + key;
      if (!name.ends_with("_total")) name += "_total";
      w.Counter(name, "Socket counter " + key + ".", l, double(value));
    }
  });
}

CollectorHandle ExportRpcClient(const rpc::Client& client, Labels labels, Registry& registry) {
  return registry.AddCollector([&client, labels = std::move(labels)](SampleWriter& w) {
    WriteClientStats(w, client.stats(), labels, /*replicas=*/true);
  });
}

CollectorHandle ExportRpcServer(const rpc::Server& server, Labels labels, Registry& registry) {
  return registry.AddCollector([&server, labels = std::move(labels)](SampleWriter& w) {
    WriteServerStats(w, server.stats(), labels);
  });
}

CollectorHandle ExportPsServer(ps::PsServer& server, Labels labels, Registry& registry) {
  return registry.AddCollector([&server, labels = std::move(labels)](SampleWriter& w) {
    ps::PsServerCounters c = server.counters();
    w.Counter("bx_ps_server_fetches_total", "Fetches answered.", labels, double(c.fetches));
    w.Counter("bx_ps_server_pushes_acked_total", "Acks sent for new pushes.", labels,
              double(c.pushes_acked));
    w.Counter("bx_ps_server_pushes_duplicate_total", "Acks sent for retries of applied pushes.",
              labels, double(c.pushes_duplicate));
    w.Counter("bx_ps_server_push_errors_total", "Pushes answered with an error.", labels,
              double(c.push_errors));
    w.Counter("bx_ps_server_forwards_total", "Forwarded pushes handled (as a backup).", labels,
              double(c.forwards));
    ps::ShardReplica& replica = ps::PsInternals::Core(server).replica();
    ps::ShardReplica::Role role = replica.role();
    for (ps::ShardReplica::Role r :
         {ps::ShardReplica::Role::kBackup, ps::ShardReplica::Role::kPrimary,
          ps::ShardReplica::Role::kFenced}) {
      w.Gauge("bx_ps_replica_role", "1 for the replica's current role, else 0.",
              With(labels, {{"role", std::string(ps::ShardReplica::RoleName(r))}}),
              r == role ? 1 : 0);
    }
    ps::ShardReplica::Position position = replica.position();
    w.Gauge("bx_ps_replica_epoch", "The replica's epoch.", labels, double(position.epoch));
    w.Gauge("bx_ps_replica_lsn", "The replica's last applied log sequence number.", labels,
            double(position.lsn));
    w.Gauge("bx_ps_replica_live_backups", "Live backups of a primary (0 otherwise).", labels,
            double(replica.live_backups()));
    w.Gauge("bx_ps_replica_in_sync", "A primary's replicas in sync, itself counted (0 otherwise).",
            labels, double(replica.in_sync_replicas()));
    w.Counter("bx_ps_server_pushes_below_min_in_sync_total",
              "Pushes refused or failed while fewer than min_in_sync replicas were in sync.",
              labels, double(c.pushes_below_min_in_sync));
    w.Counter("bx_ps_server_pushes_session_refused_total",
              "Pushes refused because the replica did not know their client's session (evicted "
              "from the dedup record, or the id bound to another key).",
              labels, double(c.pushes_session_refused));
    w.Gauge("bx_ps_dedup_clients", "Clients the replica's dedup record remembers.", labels,
            double(c.dedup_clients));
    w.Counter("bx_ps_dedup_evictions_total", "Clients evicted from the replica's dedup record.",
              labels, double(c.dedup_evictions));
    w.Counter("bx_ps_server_checkpoints_total", "Checkpoint snapshots offered as primary.", labels,
              double(c.checkpoints));
    if (replica.follower()) {
      // A serving replica (docs/PS.md "Serving sync"): how old the training state it holds is.
      const ps::ShardState::Synced synced = replica.synced();
      if (synced.asked_at_ms != 0) {
        w.Gauge("bx_ps_sync_lag_seconds",
                "Now minus when the follower asked for the training state this replica holds.",
                labels, double(ps::SyncLagMs(synced)) / 1000.0);
      }
      w.Counter("bx_ps_syncs_total", "Sync records (training-to-serving) applied here.", labels,
                double(replica.syncs_applied()));
      w.Counter("bx_ps_sync_full_copies_total", "Of those, full copies.", labels,
                double(replica.sync_full_copies()));
    }
    for (const ps::PsTableStats& t : server.table_stats()) {
      const Labels table = With(labels, {{"table", t.name}});
      w.Gauge("bx_ps_table_rows", "Rows a table holds on this replica.", table, double(t.rows));
      w.Gauge("bx_ps_table_bytes",
              "Bytes of a table's rows on this replica (keys, weights, optimiser state).", table,
              double(t.bytes));
      w.Counter("bx_ps_table_evictions_total",
                "Rows a bounded table evicted on this replica to keep within max_rows/max_bytes.",
                table, double(t.evicted));
      w.Counter("bx_ps_table_expirations_total",
                "Rows a table with a ttl evicted on this replica for not being pushed within it.",
                table, double(t.expired));
      w.Counter("bx_ps_table_admissions_total",
                "Ids a table with admit_after_pushes gave a row on this replica.", table,
                double(t.admitted));
      w.Counter("bx_ps_table_admission_rejections_total",
                "Pushes of ids not yet admitted, counted and dropped on this replica.", table,
                double(t.admission_rejected));
    }
    WriteServerStats(w, server.rpc_stats(), labels);
  });
}

CollectorHandle ExportPsClient(const ps::PsClient& client, Labels labels, Registry& registry) {
  return registry.AddCollector([&client, labels = std::move(labels)](SampleWriter& w) {
    ps::PsClientStats s = client.stats();
    w.Counter("bx_ps_client_push_failovers_total",
              "Shard pushes moved to another replica of the shard.", labels,
              double(s.push_failovers));
    WriteClientStats(w, s.rpc, labels, /*replicas=*/false);
  });
}

Status Exports::Add(Result<CollectorHandle> handle) {
  BX_ASSIGN_OR_RETURN(CollectorHandle added, std::move(handle));
  handles_.push_back(std::move(added));
  return Status();
}

}  // namespace bx::observe
