// `bx ps serve|rank|train --cluster FILE`: the parameter server's roles as separate processes,
// so that a cluster can span hosts (issue 8). serve runs one replica of one shard; rank and
// train run the `bx demo` workloads against the cluster the file describes.
//
// Failure handling here is the minimum: replica 0 of each shard is the primary of epoch 1 and
// nothing promotes a backup when it dies (ShardReplica supports it; a detector is not built).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "bx/bemalloc.h"
#include "commands.h"
#include "ps/service/ps_service.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "verbs/verbs.h"

namespace bx::tools {

// Defined in demo_command.cc.
void RunPsWorkload(const ps::ClusterSpec& spec, const std::string& scheme, bool training,
                   double seconds, int threads, bool json);

namespace {

using namespace std::chrono_literals;

volatile sig_atomic_t g_stop = 0;

[[noreturn]] void Fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "bx ps: %s: %s\n", what.c_str(), status.ToString().c_str());
  throw CLI::RuntimeError(1);
}

ps::ClusterSpec Load(const std::string& path) {
  Result<ps::ClusterSpec> spec = ps::LoadClusterFile(path);
  if (!spec.ok()) Fail("cluster file", spec.status());
  return std::move(spec).value();
}

// Listens on the host's addresses from the file, bound to every interface on those ports.
std::string AnyHost(const std::string& url) {
  size_t scheme_end = url.find("://");
  size_t port = url.rfind(':');
  if (scheme_end == std::string::npos || port == std::string::npos || port <= scheme_end) {
    return url;
  }
  return url.substr(0, scheme_end + 3) + "0.0.0.0" + url.substr(port);
}

void Serve(const std::string& path, int shard, int replica) {
  ps::ClusterSpec spec = Load(path);
  if (shard < 0 || size_t(shard) >= spec.shards.size() || replica < 0 ||
      size_t(replica) >= spec.shards[shard].replicas.size()) {
    Fail("serve", Status(StatusCode::kInvalidArgument, "no such shard/replica in the file"));
  }
  setenv("BX_VERBS", "sim", 0);
  tcp::RegisterTcpTransport();
  rdma::RegisterRdmaTransport();
  Result<verbs::Device> device = verbs::Device::Open("");
  if (!device.ok()) Fail("open RDMA device", device.status());
  auto* kept = new verbs::Device(std::move(device).value());  // bemalloc uses it until exit
  if (Status s = bemalloc::Init(*kept); !s.ok()) Fail("bemalloc", s);

  ps::PsServerOptions options;
  options.rpc.worker_threads = 2;
  Result<std::unique_ptr<ps::PsServer>> server = ps::PsServer::Create(spec.tables, options);
  if (!server.ok()) Fail("server", server.status());
  const ps::ReplicaSpec& me = spec.shards[shard].replicas[replica];
  std::vector<std::string> urls;
  if (!me.rdma.empty()) urls.push_back(AnyHost(me.rdma));
  if (!me.tcp.empty()) urls.push_back(AnyHost(me.tcp));
  if (Status s = (*server)->Start(urls); !s.ok()) Fail("listen", s);
  std::fprintf(stderr, "shard %d replica %d listening on %s\n", shard, replica,
               (*server)->address().ToString().c_str());

  if (replica == 0) {
    // The primary waits for its backups: a forward that fails drops the backup for good.
    std::vector<rpc::ReplicaAddress> backups;
    for (size_t r = 1; r < spec.shards[shard].replicas.size(); ++r) {
      const ps::ReplicaSpec& b = spec.shards[shard].replicas[r];
      rpc::ReplicaAddress address{b.rdma, b.tcp};
      Result<std::unique_ptr<rpc::Client>> probe = rpc::Client::Create({address});
      if (!probe.ok()) Fail("backup client", probe.status());
      while (!g_stop && !(*probe)->WaitReady(1s).ok()) {
        std::fprintf(stderr, "waiting for backup %s\n", address.ToString().c_str());
      }
      backups.push_back(address);
    }
    if (Status s = (*server)->BecomePrimary(1, backups); !s.ok()) Fail("promote", s);
    std::fprintf(stderr, "primary of epoch 1 with %zu backups\n", backups.size());
  }
  signal(SIGINT, [](int) { g_stop = 1; });
  signal(SIGTERM, [](int) { g_stop = 1; });
  while (!g_stop) std::this_thread::sleep_for(100ms);
  ps::PsServerCounters c = (*server)->counters();
  std::fprintf(
      stderr,
      "stopping: fetches %llu, pushes %llu (+%llu duplicates, %llu errors), forwards "
      "%llu\n",
      static_cast<unsigned long long>(c.fetches), static_cast<unsigned long long>(c.pushes_acked),
      static_cast<unsigned long long>(c.pushes_duplicate),
      static_cast<unsigned long long>(c.push_errors), static_cast<unsigned long long>(c.forwards));
  (*server)->Stop();
}

}  // namespace

void AddPsCommand(CLI::App* app) {
  CLI::App* ps = app->add_subcommand("ps", "Parameter-server roles as separate processes");
  ps->require_subcommand(1);

  struct ServeOptions {
    std::string cluster;
    int shard = 0, replica = 0;
  };
  auto serve = std::make_shared<ServeOptions>();
  CLI::App* s = ps->add_subcommand("serve", "Run one replica of one shard until SIGINT/SIGTERM");
  s->add_option("--cluster", serve->cluster, "Cluster file (JSON)")->required();
  s->add_option("--shard", serve->shard, "Shard index")->required();
  s->add_option("--replica", serve->replica, "Replica index (0: primary)")->required();
  s->callback([serve] { Serve(serve->cluster, serve->shard, serve->replica); });

  struct WorkloadOptions {
    std::string cluster;
    double seconds = 15;
    int threads = 4;
    bool json = false;
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
    w->callback([options, training] {
      ps::ClusterSpec spec = Load(options->cluster);
      RunPsWorkload(spec, spec.transport, training, options->seconds, options->threads,
                    options->json);
    });
  }
}

}  // namespace bx::tools
