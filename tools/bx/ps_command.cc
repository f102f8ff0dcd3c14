// `bx ps serve|rank|train --cluster FILE`: the parameter server's roles as separate processes,
// so that a cluster can span hosts. serve runs one replica of one shard; rank and
// train run the `bx demo` workloads against the cluster the file describes.
//
// Replica 0 of each shard starts as the primary of epoch 1; every other replica runs a
// ps::FailoverMonitor that promotes the next replica in file order when the primary stops
// answering (docs/PS.md "Automatic failover"). `bx ps train --verify` is a deterministic,
// checkable trainer for the multi-host failover test (src/ps/service/tests/multihost_test.sh).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/percentile.h"
#include "bx/init.h"
#include "bx/metrics.h"
#include "bx/observe.h"
#include "bx/ps/client.h"
#include "bx/ps/server.h"
#include "bx/ps/serving_sync.h"
#include "commands.h"
#include "ps_common.h"
#include "ps_reach.h"
#include "ps_workload.h"
#include "repeat_limiter.h"

namespace bx::tools {

[[noreturn]] void FailPs(const std::string& what, const Status& status) {
  std::fprintf(stderr, "bx ps: %s: %s\n", what.c_str(), status.ToString().c_str());
  throw CLI::RuntimeError(1);
}

// The cluster file's "rdma" settings become this process's BX_GID_INDEX, BX_TRAFFIC_CLASS and
// BX_SERVICE_LEVEL, which every rdma:// transport it creates applies; a host that sets one
// itself keeps its own.
static void ExportRdmaSettings(const ps::ClusterSpec::RdmaSettings& rdma) {
  const std::pair<const char*, int> settings[] = {{"BX_GID_INDEX", rdma.gid_index},
                                                  {"BX_TRAFFIC_CLASS", rdma.traffic_class},
                                                  {"BX_SERVICE_LEVEL", rdma.service_level}};
  for (const auto& [name, value] : settings)
    if (value >= 0) setenv(name, std::to_string(value).c_str(), /*overwrite=*/0);
}

ps::ClusterSpec LoadClusterOrFail(const std::string& path) {
  Result<ps::ClusterSpec> spec = ps::LoadClusterFile(path);
  if (!spec.ok()) FailPs("cluster file", spec.status());
  ExportRdmaSettings(spec->rdma);  // before any transport exists
  return std::move(spec).value();
}

void InitPsProcess() {
  setenv("BX_VERBS", "sim", 0);  // the simnic unless the user chose otherwise
  if (Status s = Init(); !s.ok()) FailPs("init", s);
}

// Set by SIGINT/SIGTERM, read by every thread of a run (a lock-free atomic: safe in a signal
// handler, and not a data race between the threads as a volatile would be).
static std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void StopOnSigintOrSigterm() {
  signal(SIGINT, [](int) { g_stop = true; });
  signal(SIGTERM, [](int) { g_stop = true; });
}

bool PsStopRequested() {
  return g_stop.load();
}

namespace {

using namespace std::chrono_literals;

// With --listen-any: the file's port on every interface (for a host behind NAT, whose address in
// the file is not one of its own).
std::string AnyHost(const std::string& url) {
  size_t scheme_end = url.find("://");
  size_t port = url.rfind(':');
  if (scheme_end == std::string::npos || port == std::string::npos || port <= scheme_end) {
    return url;
  }
  return url.substr(0, scheme_end + 3) + "0.0.0.0" + url.substr(port);
}

struct FailoverFlags {
  std::string etcd;             // the configuration store's URL: failover with leases
  int lease_ms = 2000;          // the primary's lease (etcd grants whole seconds)
  bool without_leases = false;  // the old detector, no store (unsafe; the chaos tests' control)
  int timeout_ms = 1000;        // without leases: silence before a backup takes over (0: never)
  int probe_ms = 100;
  // With a store: a primary stopped by SIGINT/SIGTERM first hands its shard to a backup (a
  // planned handover), so the shard waits milliseconds for its next primary, not a lease.
  bool handover_on_stop = true;
};

struct MetricsFlags {
  int port = -1;  // >= 0: serve /metrics (0: any free port)
  std::string address = "127.0.0.1";
};

ps::FailoverOptions MonitorOptions(const ps::ClusterSpec& spec, int shard, int replica,
                                   const FailoverFlags& failover) {
  ps::FailoverOptions fo;
  for (const ps::ReplicaSpec& r : spec.shards[shard].replicas) {
    fo.replicas.push_back({r.rdma, r.tcp});
  }
  fo.self = size_t(replica);
  fo.shard = uint32_t(shard);
  fo.probe_interval = std::chrono::milliseconds(failover.probe_ms);
  return fo;
}

std::unique_ptr<ps::FailoverMonitor> StartMonitor(ps::PsServer* server, ps::FailoverOptions fo) {
  Result<std::unique_ptr<ps::FailoverMonitor>> started =
      ps::FailoverMonitor::Start(server, std::move(fo));
  if (!started.ok()) FailPs("failover", started.status());
  return std::move(started).value();
}

struct ServeOptions {
  std::string cluster;
  int shard = 0, replica = 0;
  bool listen_any = false;
  float max_abs_gradient = ps::PsServerOptions{}.max_abs_gradient;
  // Per remote address and transport: far above what one host's trainers, rankers and peer
  // replicas open, far below the descriptor limit a connection flood would reach.
  int max_connections_per_peer = 256;
  // Clients heartbeat an idle connection every 100 ms: 30 s of silence is no client of ours.
  int idle_timeout_ms = 30000;
  // Request bytes waiting for the two workers before the next request is answered "server busy".
  size_t max_queued_request_mib = rpc::ServerOptions{}.max_queued_request_bytes >> 20;
  FailoverFlags failover;
  MetricsFlags metrics;
  std::string restore;  // a checkpoint directory (bx ps checkpoint) to start from
  std::string follow;   // a training cluster file to follow (docs/PS.md "Serving sync")
  double sync_every_s = 1.0;
};

void Serve(const ServeOptions& serve) {
  const int shard = serve.shard, replica = serve.replica;
  const FailoverFlags& failover = serve.failover;
  ps::ClusterSpec spec = LoadClusterOrFail(serve.cluster);
  if (shard < 0 || size_t(shard) >= spec.shards.size()) {
    FailPs("serve", InvalidArgument("--shard " + std::to_string(shard) + ": the cluster file has " +
                                    std::to_string(spec.shards.size()) + " shards (--shard 0.." +
                                    std::to_string(spec.shards.size() - 1) + ")"));
  }
  const size_t replicas = spec.shards[shard].replicas.size();
  if (replica < 0 || size_t(replica) >= replicas) {
    FailPs("serve", InvalidArgument("--replica " + std::to_string(replica) + ": shard " +
                                    std::to_string(shard) + " has " + std::to_string(replicas) +
                                    " replicas in the cluster file (--replica 0.." +
                                    std::to_string(replicas - 1) + ")"));
  }
  InitPsProcess();

  // The replica's own clients (to its backups; the failover monitor's pings and catch-up) on one
  // transport per scheme, not one each: left alone, every rpc::Client starts its own, with an
  // I/O thread, so a primary's threads would grow with its backups and a ping could start one.
  // The rdma ones share the process's I/O threads with the server's (they share one NIC).
  TransportOptions client_transport_options;
  client_transport_options.auth_secret = spec.secret;
  client_transport_options.privileged_secret = spec.replica_secret;
  client_transport_options.rdma.share_io_threads = true;
  std::unique_ptr<Transport> client_rdma, client_tcp;
  for (const ps::ReplicaSpec& r : spec.shards[shard].replicas) {
    if (!r.rdma.empty() && client_rdma == nullptr) {
      // Without an RDMA device the clients fall back to TCP as they would have on their own.
      Result<std::unique_ptr<Transport>> t = CreateTransport("rdma", client_transport_options);
      if (t.ok()) client_rdma = std::move(t).value();
    }
    if (!r.tcp.empty() && client_tcp == nullptr) {
      Result<std::unique_ptr<Transport>> t = CreateTransport("tcp", client_transport_options);
      if (!t.ok()) FailPs("client transport", t.status());
      client_tcp = std::move(t).value();
    }
  }

  ps::PsServerOptions options;
  options.auth_secret = spec.secret;
  options.replica_secret = spec.replica_secret;
  options.rpc.worker_threads = 2;
  options.rpc.transport.rdma.share_io_threads = true;
  options.backup_client.rdma_transport = client_rdma.get();
  options.backup_client.tcp_transport = client_tcp.get();
  options.max_abs_gradient = serve.max_abs_gradient;
  options.min_in_sync = ps::MinInSyncOf(spec, size_t(shard));
  options.rpc.transport.max_connections_per_peer = serve.max_connections_per_peer;
  options.rpc.idle_timeout = std::chrono::milliseconds(serve.idle_timeout_ms);
  options.rpc.max_queued_request_bytes = serve.max_queued_request_mib << 20;
  options.follower = !serve.follow.empty();
  Result<std::unique_ptr<ps::PsServer>> server = ps::PsServer::Create(spec.tables, options);
  if (!server.ok()) FailPs("server", server.status());
  // Checked before serving: a serving cluster that cannot follow its training cluster says so
  // at start, not at its first sync.
  std::unique_ptr<ps::ServingSync> serving_sync;
  if (!serve.follow.empty()) {
    if (!(serve.sync_every_s > 0)) {
      FailPs("follow", InvalidArgument("--sync-every must be positive"));
    }
    ps::ServingSyncOptions sync_options;
    sync_options.training = LoadClusterOrFail(serve.follow);
    sync_options.shard = uint32_t(shard);
    sync_options.shard_count = uint32_t(spec.shards.size());
    sync_options.every = std::chrono::milliseconds(int64_t(serve.sync_every_s * 1000));
    sync_options.client.log = [](std::string_view) {};
    Result<std::unique_ptr<ps::ServingSync>> started =
        ps::ServingSync::Start(server->get(), std::move(sync_options));
    if (!started.ok()) FailPs("follow " + serve.follow, started.status());
    serving_sync = std::move(started).value();
    std::fprintf(stderr, "shard %d replica %d follows %s every %.3g s (pushes refused)\n", shard,
                 replica, serve.follow.c_str(), serve.sync_every_s);
  }
  if (!serve.restore.empty()) {
    if (Status s =
            (*server)->RestoreFrom(serve.restore, uint32_t(shard), uint32_t(spec.shards.size()));
        !s.ok()) {
      FailPs("restore", s);
    }
    std::fprintf(stderr, "shard %d replica %d restored from the checkpoint in %s\n", shard, replica,
                 serve.restore.c_str());
  }
  const ps::ReplicaSpec& me = spec.shards[shard].replicas[replica];
  std::vector<std::string> urls;
  // The address the file names, so that a host name that is not this host's, or an address no
  // interface has, fails here ("cannot assign requested address") rather than at the clients.
  if (!me.rdma.empty()) urls.push_back(serve.listen_any ? AnyHost(me.rdma) : me.rdma);
  if (!me.tcp.empty()) urls.push_back(serve.listen_any ? AnyHost(me.tcp) : me.tcp);
  if (Status s = (*server)->Start(urls); !s.ok()) {
    // An address no interface of this host has: say which flag serves the file's port anyway.
    if (!serve.listen_any && s.message().find("assign requested address") != std::string::npos) {
      FailPs("listen",
             Status(s.code(), s.message() + "; the cluster file gives shard " +
                                  std::to_string(shard) + " replica " + std::to_string(replica) +
                                  " an address that is not this host's: run it on that "
                                  "host, or pass --listen-any (every interface, the "
                                  "file's port; a host behind NAT)"));
    }
    FailPs("listen", s);
  }
  std::unique_ptr<metrics::MetricsServer> metrics_endpoint =
      StartMetricsEndpoint(serve.metrics.port, serve.metrics.address);
  observe::CollectorHandle exported;  // reset before the server stops
  if (metrics_endpoint) {
    exported = observe::ExportPsServer(
        **server, {{"shard", std::to_string(shard)}, {"replica", std::to_string(replica)}});
  }
  std::fprintf(stderr, "shard %d replica %d listening on %s, min_in_sync %zu of %zu\n", shard,
               replica, (*server)->address().ToString().c_str(), options.min_in_sync,
               spec.shards[shard].replicas.size());
  if (replicas == 1) {
    // A lone replica's rows live in its memory only, between checkpoints.
    std::fprintf(stderr,
                 "not durable: shard %d has one replica, so its rows since the last `bx ps "
                 "checkpoint` will not survive a restart of this process; list more replicas "
                 "for it in the cluster file to keep them\n",
                 shard);
  }
  if (spec.insecure) {
    std::fprintf(stderr,
                 "insecure: the cluster file says \"insecure\": true; every method, replication "
                 "included, is served to anyone who can connect\n");
  }

  std::unique_ptr<ps::FailoverMonitor> monitor;
  const std::string store = failover.etcd.empty() ? spec.config_store : failover.etcd;
  if (!store.empty()) {
    // Every replica runs a monitor; replica 0's creates the configuration once all replicas
    // have registered, and becomes primary of epoch 1 under a lease.
    ps::FailoverOptions fo = MonitorOptions(spec, shard, replica, failover);
    fo.client.rdma_transport = client_rdma.get();
    fo.client.tcp_transport = client_tcp.get();
    fo.config_store = store;
    fo.lease_ttl = std::chrono::milliseconds(failover.lease_ms);
    monitor = StartMonitor(server->get(), std::move(fo));
  } else if (replica == 0) {
    // The primary waits for its backups: a forward that fails drops the backup for good.
    std::vector<rpc::ReplicaAddress> backups;
    for (size_t r = 1; r < spec.shards[shard].replicas.size(); ++r) {
      const ps::ReplicaSpec& b = spec.shards[shard].replicas[r];
      rpc::ReplicaAddress address{b.rdma, b.tcp};
      rpc::ClientOptions probe_options;
      probe_options.transport.auth_secret = spec.secret;
      Result<std::unique_ptr<rpc::Client>> probe = rpc::Client::Create({address}, probe_options);
      if (!probe.ok()) FailPs("backup client", probe.status());
      while (!g_stop && !(*probe)->WaitReady(1s).ok()) {
        std::fprintf(stderr, "waiting for backup %s\n", address.ToString().c_str());
      }
      backups.push_back(address);
    }
    if (Status s = (*server)->BecomePrimary(1, backups); !s.ok()) FailPs("promote", s);
    std::fprintf(stderr, "primary of epoch 1 with %zu backups\n", backups.size());
  }
  // "ready" once this replica's role is settled: a primary once it is primary with its backups
  // linked (with a store: once its monitor promoted it, which it does only after every replica
  // registered), a backup at once. A cluster whose every replica said it takes pushes without
  // failing over (LocalCluster, scripts).
  bool ready = false;
  auto announce_ready = [&] {
    if (ready) return;
    if (replica != 0) {
      ready = true;
      std::fprintf(stderr, "shard %d replica %d ready: backup\n", shard, replica);
      return;
    }
    const uint64_t epoch = (*server)->primary_epoch();
    if (epoch == 0) return;  // the store's monitor has not made it primary yet
    ready = true;
    std::fprintf(stderr, "shard %d replica %d ready: primary of epoch %llu\n", shard, replica,
                 static_cast<unsigned long long>(epoch));
  };
  if (store.empty() && !failover.without_leases && failover.timeout_ms > 0 &&
      spec.shards[shard].replicas.size() > 1) {
    std::fprintf(stderr,
                 "failover is off: it needs a configuration store (--etcd URL); "
                 "--unsafe-failover-without-leases runs the old detector\n");
  }
  if (store.empty() && failover.without_leases && replica != 0 && failover.timeout_ms > 0) {
    ps::FailoverOptions fo = MonitorOptions(spec, shard, replica, failover);
    fo.client.rdma_transport = client_rdma.get();
    fo.client.tcp_transport = client_tcp.get();
    fo.failure_timeout = std::chrono::milliseconds(failover.timeout_ms);
    fo.unsafe_without_leases = true;  // --unsafe-failover-without-leases
    monitor = StartMonitor(server->get(), std::move(fo));
  }
  StopOnSigintOrSigterm();
  announce_ready();
  while (!g_stop) {
    std::this_thread::sleep_for(100ms);
    announce_ready();
  }
  if (monitor && !store.empty() && failover.handover_on_stop && (*server)->primary_epoch() != 0) {
    const auto start = std::chrono::steady_clock::now();
    // Pushes are refused while it runs: if it cannot finish within half a lease (a backup slow
    // to take the last pushes), giving the lease back is the faster way out.
    Result<ps::HandoverResult> handed =
        monitor->HandOver(std::nullopt, std::chrono::milliseconds(failover.lease_ms / 2));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (handed.ok()) {
      std::fprintf(stderr, "stopping: handed shard %d over to replica %u at lsn %llu in %.1f ms\n",
                   shard, handed->successor, static_cast<unsigned long long>(handed->lsn), ms);
    } else {
      // The backups take over once the lease, given back below, is gone.
      std::fprintf(stderr, "stopping: no handover (%s)\n", handed.status().ToString().c_str());
    }
  }
  serving_sync.reset();
  monitor.reset();
  ps::PsServerCounters c = (*server)->counters();
  std::fprintf(
      stderr,
      "stopping: fetches %llu, pushes %llu (+%llu duplicates, %llu errors), forwards "
      "%llu, replica calls refused %llu, pushes refused below min_in_sync %llu, pushes of "
      "unknown sessions %llu, dedup clients %llu (%llu evicted)\n",
      static_cast<unsigned long long>(c.fetches), static_cast<unsigned long long>(c.pushes_acked),
      static_cast<unsigned long long>(c.pushes_duplicate),
      static_cast<unsigned long long>(c.push_errors), static_cast<unsigned long long>(c.forwards),
      static_cast<unsigned long long>(c.replica_method_refusals),
      static_cast<unsigned long long>(c.pushes_below_min_in_sync),
      static_cast<unsigned long long>(c.pushes_session_refused),
      static_cast<unsigned long long>(c.dedup_clients),
      static_cast<unsigned long long>(c.dedup_evictions));
  exported.Reset();
  (*server)->Stop();
}

struct VerifyFlags {
  bool enabled = false;
  int keys = 16;
  uint64_t key_base = 0;
  int push_timeout_ms = 10000;
  // Pushes in flight at any time in [from, to) ms after the start are also summarised alone
  // (the stall a fault injected then costs); off while to <= from.
  int window_from_ms = 0;
  int window_to_ms = 0;
  // Pushes per second per thread (0: each as soon as the one before is acknowledged). A fault
  // test needs pushes in flight through the fault, not a saturated host.
  double push_rate = 0;
};

// `bx ps train --verify`: every push is one key with a gradient of ones to the cluster's first
// table, which must be SGD with learning rate 1 and zero initialisation, so a row holds exactly
// -(pushes applied to its key) in every element. Counting the pushes acked and the ones that
// failed per key, the final fetch must show acked <= applied <= acked + failed for every key:
// fewer means an acknowledged push was lost, more means a push was applied twice.
void RunVerify(const ps::ClusterSpec& spec, double seconds, int threads, const VerifyFlags& flags) {
  // SIGINT/SIGTERM end the pushes early, as a scheduler ends a job: each thread finishes the
  // push in flight, and the final read and the check run as at the end of --duration. (Set
  // first: a signal during the connects must not kill the run before it reports.)
  StopOnSigintOrSigterm();
  if (spec.tables.empty()) FailPs("verify", Status(StatusCode::kInvalidArgument, "no tables"));
  const ps::TableConfig& table = spec.tables[0];
  if (table.optimizer.kind != ps::OptimizerKind::kSgd || table.optimizer.learning_rate != 1.0f ||
      table.init.kind != ps::InitializerKind::kZeros) {
    FailPs("verify", Status(StatusCode::kInvalidArgument,
                            "the first table must be SGD with learning_rate 1 and zeros init"));
  }
  InitPsProcess();
  // As rank and train: one transport for the reachability check and every RPC client, and a
  // cluster that is not there fails the run at once, in one line.
  ConnectedPsClient connected = ConnectPsClientOrFail(spec, "train --verify");
  ps::PsClient& client = *connected.client;
  RateLimitedStderrLog log;  // the run's errors, each kind once a second

  const size_t n = size_t(flags.keys);
  std::vector<uint64_t> keys(n);
  for (size_t k = 0; k < n; ++k) keys[k] = flags.key_base + k;
  std::vector<std::atomic<uint64_t>> acked(n), failed(n);
  std::atomic<uint64_t> longest_stall_us{0};
  const auto timeout = std::chrono::microseconds(int64_t{flags.push_timeout_ms} * 1000);
  const auto t0 = std::chrono::steady_clock::now();
  const auto end = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  std::vector<std::thread> workers;
  // Every push's latency, per thread (a few MB for a long run): the stall a fault costs shows
  // in the tail. Pushes in flight during the window are also kept apart.
  std::vector<std::vector<float>> latencies_us(size_t(std::max(threads, 1)));
  std::vector<std::vector<float>> window_us(latencies_us.size());
  const auto window_from = t0 + std::chrono::milliseconds(flags.window_from_ms);
  const auto window_to = t0 + std::chrono::milliseconds(flags.window_to_ms);
  for (int t = 0; t < std::max(threads, 1); ++t) {
    workers.emplace_back([&, t] {
      std::vector<float> ones(table.dim, 1.0f);
      auto last = std::chrono::steady_clock::now();
      for (uint64_t i = 0; !g_stop && std::chrono::steady_clock::now() < end; ++i) {
        size_t k = (size_t(t) + i) % n;
        const auto sent = std::chrono::steady_clock::now();
        Status s = client.Push(table.id, table.dim, std::span(&keys[k], 1), ones, timeout);
        const auto done = std::chrono::steady_clock::now();
        const float us = std::chrono::duration<float, std::micro>(done - sent).count();
        latencies_us[size_t(t)].push_back(us);
        if (sent < window_to && done >= window_from) window_us[size_t(t)].push_back(us);
        (s.ok() ? acked[k] : failed[k]).fetch_add(1);
        if (!s.ok()) {
          log.limiter().Report("push of key " + std::to_string(keys[k]) +
                               " failed: " + s.ToString());
        }
        if (flags.push_rate > 0) {  // the next push one interval after this one was sent
          std::this_thread::sleep_until(
              std::min(end, sent + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double>(1.0 / flags.push_rate))));
        }
        auto now = std::chrono::steady_clock::now();
        uint64_t gap =
            uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(now - last).count());
        uint64_t seen = longest_stall_us.load();
        while (gap > seen && !longest_stall_us.compare_exchange_weak(seen, gap)) {
        }
        last = now;
      }
    });
  }
  for (std::thread& w : workers) w.join();

  // The final read, retried while a failover may still be settling.
  Result<ps::FetchResult> fetched = Status(StatusCode::kUnavailable, "not fetched");
  for (int attempt = 0; attempt < 20 && !fetched.ok(); ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(250ms);
    fetched = client.Fetch(table.id, keys, 2s);
  }
  if (!fetched.ok()) FailPs("final fetch", fetched.status());

  nlohmann::json out;
  uint64_t total_acked = 0, total_failed = 0, total_applied = 0, lost = 0, doubled = 0;
  nlohmann::json mismatches = nlohmann::json::array();
  bool ok = true;
  for (size_t k = 0; k < n; ++k) {
    const float* row = fetched->values.data() + k * table.dim;
    double value = -double(row[0]);
    bool uniform = std::all_of(row, row + table.dim, [&](float v) { return v == row[0]; });
    bool integral = value >= 0 && value == std::floor(value);
    uint64_t applied = integral ? uint64_t(value) : 0;
    uint64_t a = acked[k].load(), f = failed[k].load();
    total_acked += a;
    total_failed += f;
    total_applied += applied;
    if (applied < a) lost += a - applied;
    if (applied > a + f) doubled += applied - a - f;
    if (!uniform || !integral || applied < a || applied > a + f) {
      ok = false;
      mismatches.push_back({{"key", keys[k]},
                            {"acked", a},
                            {"failed", f},
                            {"value", row[0]},
                            {"uniform_row", uniform}});
    }
  }
  ps::PsClientStats stats = client.stats();
  out["keys"] = n;
  out["acked"] = total_acked;
  out["failed"] = total_failed;
  out["applied"] = total_applied;
  out["lost"] = lost;
  out["doubled"] = doubled;
  out["push_failovers"] = stats.push_failovers;
  out["longest_stall_ms"] = double(longest_stall_us.load()) / 1000.0;
  auto merged = [](const std::vector<std::vector<float>>& per_thread) {
    std::vector<float> all;
    for (const auto& l : per_thread) all.insert(all.end(), l.begin(), l.end());
    return all;
  };
  // Latencies are recorded in microseconds and reported in milliseconds.
  auto percentile_ms = [](std::vector<float>& us, double q) {
    return double(Percentile(us, q)) / 1000.0;
  };
  std::vector<float> all = merged(latencies_us);
  out["push_p50_ms"] = percentile_ms(all, 0.50);
  out["push_p99_ms"] = percentile_ms(all, 0.99);
  out["push_p999_ms"] = percentile_ms(all, 0.999);
  out["push_max_ms"] = percentile_ms(all, 1.0);
  if (flags.window_to_ms > flags.window_from_ms) {
    std::vector<float> window = merged(window_us);
    out["window_pushes"] = window.size();
    out["window_p99_ms"] = percentile_ms(window, 0.99);
    out["window_max_ms"] = percentile_ms(window, 1.0);
  }
  out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out["stopped_by_signal"] = g_stop.load();
  out["mismatches"] = mismatches;
  out["ok"] = ok;
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  if (!ok) throw CLI::RuntimeError(1);
}

}  // namespace

ConnectedPsClient ConnectPsClientOrFail(const ps::ClusterSpec& spec, const std::string& command) {
  ps::PsClientOptions client_options;
  client_options.transport = spec.transport;
  Result<std::unique_ptr<Transport>> transport =
      CreateSharedClientTransport(spec, spec.transport, &client_options);
  if (!transport.ok()) FailPs("client transport", transport.status());
  if (Status s = CheckShardsReachable(spec, **transport, std::chrono::seconds(3)); !s.ok()) {
    FailPs(command, s);
  }
  Result<std::unique_ptr<ps::PsClient>> client = ps::PsClient::Create(spec, client_options);
  if (!client.ok()) FailPs("client", client.status());
  return {std::move(transport).value(), std::move(client).value()};
}

void AddPsCommand(CLI::App* app) {
  CLI::App* ps = app->add_subcommand("ps", "Parameter-server roles as separate processes");
  ps->require_subcommand(1);
  AddPsCheckpointCommands(ps);
  AddPsStatCommand(ps);
  AddPsHandoverCommand(ps);

  auto serve = std::make_shared<ServeOptions>();
  CLI::App* s = ps->add_subcommand("serve", "Run one replica of one shard until SIGINT/SIGTERM");
  s->footer(
      "Persistence: rows live in the replicas' memory. A shard outlives a replica through its "
      "other replicas (with --etcd, a restarted replica catches up from the primary); the whole "
      "cluster outlives its processes through `bx ps checkpoint`, from which `--restore` starts "
      "a new one (of any shard count). A shard with one replica loses the rows pushed since the "
      "last checkpoint when that process stops (it says so at start).");
  s->add_option("--cluster", serve->cluster, "Cluster file (JSON)")->required();
  s->add_option("--restore", serve->restore,
                "Start from the checkpoint in this directory (bx ps checkpoint): this shard's "
                "rows of it, whatever its shard count; every replica of the cluster restores "
                "the same checkpoint");
  s->add_option("--follow", serve->follow,
                "Serve a training cluster's rows (this cluster file's): every --sync-every, "
                "each shard's primary applies the rows changed and evicted there since its last "
                "sync, whole; pushes here are refused. Same shard count and tables");
  s->add_option("--sync-every", serve->sync_every_s,
                "Seconds between syncs with --follow (default 1: lag under 2 s)");
  s->add_option("--shard", serve->shard, "Shard index")->required();
  s->add_option("--replica", serve->replica, "Replica index (0: primary)")->required();
  s->add_option("--etcd", serve->failover.etcd,
                "Keep the shard's configuration and the primary's lease in this etcd "
                "(client URL, http://host:2379): failover that loses no acknowledged push");
  s->add_option("--lease-ms", serve->failover.lease_ms,
                "The primary's lease with --etcd (etcd rounds up to whole seconds)")
      ->check(CLI::Range(300, 600000));
  s->add_flag("--unsafe-failover-without-leases", serve->failover.without_leases,
              "Without --etcd: promote a backup when the primary is silent, with no lease (a "
              "paused or partitioned primary can go on acknowledging alone)");
  s->add_option("--failover-timeout-ms", serve->failover.timeout_ms,
                "Without leases: a backup takes over after its primary is unreachable this long "
                "(0: never)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--probe-interval-ms", serve->failover.probe_ms,
                "How often a backup pings its primary (or polls the store)")
      ->check(CLI::PositiveNumber);
  s->add_flag("!--no-handover-on-stop", serve->failover.handover_on_stop,
              "With --etcd: a primary stopped by SIGINT/SIGTERM gives up its lease without "
              "first handing the shard to a backup (bx ps handover)");
  s->add_flag("--listen-any", serve->listen_any,
              "Listen on every interface at the file's ports, not on the file's address (a host "
              "behind NAT)");
  s->add_option("--metrics-port", serve->metrics.port,
                "Serve Prometheus /metrics on this port (0: any free port)")
      ->check(CLI::Range(0, 65535));
  s->add_option("--metrics-address", serve->metrics.address,
                "Address of /metrics (default 127.0.0.1; 0.0.0.0: scrapable from other hosts)");
  s->add_option("--max-gradient", serve->max_abs_gradient,
                "Refuse a push holding a gradient element above this in magnitude (0: no "
                "bound; NaN and infinities are always refused)")
      ->check(CLI::Range(0.0f, 3.0e38f))
      ->capture_default_str();
  s->add_option("--max-connections-per-peer", serve->max_connections_per_peer,
                "Connections held per remote IP address and transport; one more is refused "
                "(ResourceExhausted at its Connect). 0: no limit")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  s->add_option("--idle-timeout-ms", serve->idle_timeout_ms,
                "Close a connection over which nothing moved for this long (clients heartbeat "
                "every 100 ms). 0: never")
      ->check(CLI::Range(0, 86400000))
      ->capture_default_str();
  s->add_option("--max-queued-request-mib", serve->max_queued_request_mib,
                "Request MiB received and waiting for a worker; a request beyond it is answered "
                "ResourceExhausted (server busy)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  s->callback([serve] { Serve(*serve); });

  struct WorkloadOptions {
    std::string cluster;
    double seconds = 15;
    int threads = 4;
    bool json = false;
    int metrics_port = -1;
    int heartbeat_timeout_ms = 0;  // 0: rpc::ClientOptions' default
    std::string start_file;
    VerifyFlags verify;
    StreamKeysFlags stream;
  };
  for (bool training : {false, true}) {
    auto options = std::make_shared<WorkloadOptions>();
    CLI::App* w = ps->add_subcommand(
        training ? "train" : "rank",
        training ? "Trainer workload: fetch, compute, push" : "Ranker workload: fan-out fetches");
    w->add_option("--cluster", options->cluster, "Cluster file (JSON)")->required();
    w->add_option("--duration", options->seconds, "Seconds");
    w->add_option("--threads", options->threads, training ? "Trainers" : "Rankers");
    w->add_flag("--json", options->json, "Print JSON");
    w->add_option("--metrics-port", options->metrics_port,
                  "Serve Prometheus /metrics on 127.0.0.1:PORT (0: any free port)")
        ->check(CLI::Range(0, 65535));
    w->add_option("--heartbeat-timeout-ms", options->heartbeat_timeout_ms,
                  "Declare a connection dead after this long without a byte (0: the RPC client's "
                  "default, 500 ms; a host with far more processes than cores needs more); "
                  "heartbeats go every fifth of it")
        ->check(CLI::NonNegativeNumber);
    w->add_option("--start-file", options->start_file,
                  "First connect to every shard (a fetch, retried up to 300 s), then wait for "
                  "this file to exist before starting the clock (many workers measured over one "
                  "window)");
    if (training) {
      w->add_flag(
          "--verify", options->verify.enabled,
          "Deterministic checked pushes (unit gradients on a fixed key set), then fetch and "
          "check exactly-once; prints JSON, exits 1 on a lost or doubled push. SIGINT or "
          "SIGTERM ends the pushes before --duration; the check follows as at its end");
      w->add_option("--verify-keys", options->verify.keys, "Keys pushed in --verify mode")
          ->check(CLI::Range(1, 1 << 20));
      w->add_option("--key-base", options->verify.key_base,
                    "First key in --verify mode (give each trainer process its own range)");
      w->add_option("--push-timeout-ms", options->verify.push_timeout_ms,
                    "Per-push deadline in --verify mode (covers a failover)")
          ->check(CLI::PositiveNumber);
      w->add_option("--window-from-ms", options->verify.window_from_ms,
                    "--verify: also report push P99/max over the pushes in flight from this "
                    "many ms after the start ...")
          ->check(CLI::NonNegativeNumber);
      w->add_option("--window-to-ms", options->verify.window_to_ms, "... to this many ms")
          ->check(CLI::NonNegativeNumber);
      w->add_option("--push-rate", options->verify.push_rate,
                    "--verify: pushes per second per thread (default 0: each as soon as the one "
                    "before is acknowledged)")
          ->check(CLI::NonNegativeNumber);
      w->add_option("--stream-keys", options->stream.keys,
                    "Push this many distinct keys (--key-base on), each once, to the first table "
                    "in batches, then print a JSON summary (an unbounded id space streaming "
                    "through a bounded table); --threads pushers, --push-timeout-ms each")
          ->check(CLI::PositiveNumber);
      w->add_option("--stream-batch", options->stream.batch, "Keys per push of --stream-keys")
          ->check(CLI::Range(1, 1 << 20));
    }
    w->callback([options, training] {
      ps::ClusterSpec spec = LoadClusterOrFail(options->cluster);
      if (options->stream.keys > 0) {
        options->stream.key_base = options->verify.key_base;
        options->stream.push_timeout_ms = options->verify.push_timeout_ms;
        if (!RunStreamKeys(spec, options->threads, options->stream)) throw CLI::RuntimeError(1);
        return;
      }
      if (options->verify.enabled) {
        return RunVerify(spec, options->seconds, options->threads, options->verify);
      }
      RunPsWorkload(spec, spec.transport, training, options->seconds, options->threads,
                    options->json, options->metrics_port, options->heartbeat_timeout_ms,
                    options->start_file);
    });
  }
}

}  // namespace bx::tools
