// One replica of one parameter-server shard, as the cluster file describes it.
//
//   ps_server cluster.json SHARD REPLICA
//
// Replica 0 starts as the primary of epoch 1, forwarding pushes to the shard's other replicas;
// the others start as backups whose FailoverMonitor promotes the next replica when the primary
// stops answering. Prints "serving" once it takes requests, then serves until SIGINT/SIGTERM.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bx/init.h"
#include "bx/log.h"
#include "bx/ps/cluster.h"
#include "bx/ps/server.h"
#include "wait_for_signal.h"

namespace {

int Fail(const bx::Status& status) {
  std::fprintf(stderr, "ps_server: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CLUSTER_FILE SHARD REPLICA\n", argv[0]);
    return 2;
  }
  bx::Result<bx::ps::ClusterSpec> spec = bx::ps::LoadClusterFile(argv[1]);
  if (!spec.ok()) return Fail(spec.status());
  const size_t shard = std::strtoul(argv[2], nullptr, 10);
  const size_t replica = std::strtoul(argv[3], nullptr, 10);
  if (shard >= spec->shards.size() || replica >= spec->shards[shard].replicas.size()) {
    return Fail(bx::InvalidArgument("no such shard or replica in the cluster file"));
  }
  bx::SetLogSink(bx::StderrLogSink());  // the library says nothing unless given a sink
  bx::InitOptions init;
  init.rdma = spec->transport == "rdma";
  if (bx::Status s = bx::Init(init); !s.ok()) return Fail(s);

  // What the cluster file says a server of this shard runs with: its secrets (without them the
  // server would answer anyone, and clients holding the secret would be refused) and how many
  // replicas must hold a push before it is acknowledged.
  bx::ps::PsServerOptions options;
  options.auth_secret = spec->secret;
  options.replica_secret = spec->replica_secret;
  options.min_in_sync = bx::ps::MinInSyncOf(*spec, shard);
  if (spec->insecure) std::fprintf(stderr, "insecure: the cluster is open to anyone\n");
  auto server = bx::ps::PsServer::Create(spec->tables, options);
  if (!server.ok()) return Fail(server.status());
  std::vector<bx::rpc::ReplicaAddress> replicas;
  for (const bx::ps::ReplicaSpec& r : spec->shards[shard].replicas) {
    replicas.push_back({r.rdma, r.tcp});
  }
  std::vector<std::string> urls;
  for (const std::string& url : {replicas[replica].rdma_url, replicas[replica].tcp_url}) {
    if (!url.empty()) urls.push_back(url);
  }
  if (bx::Status s = (*server)->Start(urls); !s.ok()) return Fail(s);

  std::unique_ptr<bx::ps::FailoverMonitor> monitor;
  if (replica == 0) {
    std::vector<bx::rpc::ReplicaAddress> backups(replicas.begin() + 1, replicas.end());
    if (bx::Status s = (*server)->BecomePrimary(1, backups); !s.ok()) return Fail(s);
  } else {
    bx::ps::FailoverOptions failover;
    failover.replicas = replicas;
    failover.self = replica;
    // The lease-less detector, so that the example needs no etcd. A production cluster gives
    // failover.config_store an etcd member's URL instead: without leases a paused or
    // partitioned primary can keep acknowledging beside its successor (docs/PS.md).
    failover.unsafe_without_leases = true;
    auto started = bx::ps::FailoverMonitor::Start(server->get(), failover);
    if (!started.ok()) return Fail(started.status());
    monitor = std::move(started).value();
  }
  std::printf("serving shard %zu replica %zu at %s\n", shard, replica,
              (*server)->address().ToString().c_str());
  std::fflush(stdout);

  WaitForSigintOrSigterm();
  return 0;
}
