// The in-process cluster and helpers the parameter-server service tests share.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "ps/service/ps_internals.h"
#include "ps/service/ps_service.h"
#include "rpc/tests/rpc_test_util.h"

namespace bx::ps::testing {

using namespace std::chrono_literals;

inline constexpr uint32_t kTable = 1;
inline constexpr uint32_t kDim = 4;

inline TableConfig Table() {
  TableConfig table;
  table.id = kTable;
  table.name = "emb";
  table.dim = kDim;
  table.optimizer.kind = OptimizerKind::kSgd;
  table.optimizer.learning_rate = 1.0f;  // w = -sum(g): exact in floats for small integers
  return table;
}

// Table() with rows of `dim` floats, as table `id`.
inline TableConfig WideTable(uint32_t dim, uint32_t id = kTable) {
  TableConfig table = Table();
  table.id = id;
  table.name = "wide" + std::to_string(id);
  table.dim = dim;
  return table;
}

// `n` distinct keys from `first` on.
inline std::vector<uint64_t> SequentialKeys(size_t n, uint64_t first = 1) {
  std::vector<uint64_t> keys(n);
  std::iota(keys.begin(), keys.end(), first);
  return keys;
}

// `shards` x `replicas` servers on `scheme`; replica 0 of each shard is primary (epoch 1).
struct Cluster {
  ClusterSpec spec;
  std::vector<std::vector<std::unique_ptr<PsServer>>> servers;
  float max_abs_gradient = PsServerOptions{}.max_abs_gradient;  // set before Start
  std::string replica_secret;                                   // set before Start (needs a secret)
  std::vector<TableConfig> tables = {Table()};                  // set before Start
  size_t min_in_sync = 1;                                       // set before Start
  // The backup links' slowest_transfer_bytes_per_second (0: the default); set before Start.
  size_t slowest_transfer_bytes_per_second = 0;
  size_t max_dedup_clients = PsServerOptions{}.max_dedup_clients;  // set before Start
  bool follower = false;           // a serving cluster (PsServerOptions::follower); before Start
  bool sync_visible_whole = true;  // its control (PsServerOptions::sync_visible_whole)
  std::string restore_from;        // a checkpoint every server restores from (RestoreFrom) at Start

  // With `secret`, a cluster whose file names a secret_file (ClusterSpec::secret).
  // Without `promote`, every replica stays a backup (a leased monitor creates the epoch).
  void Start(const std::string& scheme, int shards, int replicas, const std::string& secret = {},
             bool promote = true) {
    spec.transport = scheme;
    spec.secret = secret;
    spec.replica_secret = replica_secret;
    spec.tables = tables;
    for (int s = 0; s < shards; ++s) {
      servers.emplace_back();
      ShardSpec shard;
      for (int r = 0; r < replicas; ++r) {
        Result<std::unique_ptr<PsServer>> server = PsServer::Create(spec.tables, ServerOptions());
        ASSERT_TRUE(server.ok()) << server.status().ToString();
        if (!restore_from.empty()) {
          Status restored = (*server)->RestoreFrom(restore_from, s, shards);
          ASSERT_TRUE(restored.ok()) << restored.ToString();
        }
        ASSERT_TRUE((*server)->Start({scheme + "://127.0.0.1:0"}).ok());
        rpc::ReplicaAddress address = (*server)->address();
        shard.replicas.push_back({address.rdma_url, address.tcp_url});
        servers.back().push_back(std::move(server).value());
      }
      std::vector<rpc::ReplicaAddress> backups;
      for (int r = 1; r < replicas; ++r) backups.push_back(servers.back()[r]->address());
      if (promote) {
        ASSERT_TRUE(servers.back()[0]->BecomePrimary(1, backups).ok());
      }
      spec.shards.push_back(shard);
    }
  }

  // Replaces a replica's server with a new, empty one listening at the same address (a
  // restarted process). Whatever watched the old one must be gone first.
  void Restart(int shard, int replica) {
    servers[shard][replica].reset();
    const ReplicaSpec& address = spec.shards[shard].replicas[replica];
    Result<std::unique_ptr<PsServer>> server = PsServer::Create(spec.tables, ServerOptions());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    Status started = (*server)->Start({spec.transport == "rdma" ? address.rdma : address.tcp});
    ASSERT_TRUE(started.ok()) << started.ToString();
    servers[shard][replica] = std::move(server).value();
  }

 private:
  PsServerOptions ServerOptions() const {
    PsServerOptions options;
    options.auth_secret = spec.secret;
    options.replica_secret = spec.replica_secret;
    options.rpc.worker_threads = 1;
    options.max_abs_gradient = max_abs_gradient;
    options.min_in_sync = min_in_sync;
    options.max_dedup_clients = max_dedup_clients;
    options.follower = follower;
    options.sync_visible_whole = sync_visible_whole;
    if (slowest_transfer_bytes_per_second != 0) {
      options.backup_client.slowest_transfer_bytes_per_second = slowest_transfer_bytes_per_second;
    }
    options.rpc.log = [](std::string_view) {};
    options.backup_client.log = [](std::string_view) {};
    return options;
  }
};

inline std::unique_ptr<PsClient> MakeClient(const ClusterSpec& spec) {
  PsClientOptions options;
  options.transport = spec.transport;
  options.rpc.log = [](std::string_view) {};
  Result<std::unique_ptr<PsClient>> client = PsClient::Create(spec, options);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(client).value() : nullptr;
}
inline std::unique_ptr<PsClient> MakeClient(const Cluster& cluster) {
  return MakeClient(cluster.spec);
}

// The first float of `key`'s row as `server`'s replica holds it (NaN when the fetch fails).
inline float FirstValue(PsServer& server, uint64_t key) {
  std::vector<std::byte> row(kDim * sizeof(float));
  float first = std::numeric_limits<float>::quiet_NaN();
  if (Status s = PsInternals::Core(server).replica().Fetch(kTable, {&key, 1}, row); !s.ok()) {
    ADD_FAILURE() << "fetch from the replica: " << s.ToString();
    return first;
  }
  std::memcpy(&first, row.data(), sizeof first);
  return first;
}

// How long a test waits for a monitor to reach a state (sanitizer builds on a loaded host).
inline constexpr auto kWaitLimit = 30s;

// A monitor's log lines, readable while the monitor thread writes them.
class MonitorLog {
 public:
  std::function<void(std::string_view)> Sink() {
    return [this](std::string_view line) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(line);
    };
  }
  bool Contains(std::string_view text) const {
    std::lock_guard lock(mu_);
    for (const std::string& line : lines_) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
  std::string Dump() const {
    std::lock_guard lock(mu_);
    std::string all;
    for (const std::string& line : lines_) all += line + "\n";
    return all;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

// A trainer thread: pushes ones to `keys` (all of them in each push, one push at a time) until
// stopped, counting the acknowledged pushes; a failed push fails the test.
class OnesTrainer {
 public:
  OnesTrainer(PsClient& client, std::vector<uint64_t> keys)
      : keys_(std::move(keys)), thread_([this, &client] {
          const std::vector<float> ones(keys_.size() * kDim, 1.0f);
          while (!stop_) {
            Status s = client.Push(kTable, kDim, keys_, ones, 60s);
            if (!s.ok()) {
              ADD_FAILURE() << "push to key " << keys_.front() << "...: " << s.ToString();
              return;
            }
            ++acked;
          }
        }) {}
  OnesTrainer(PsClient& client, uint64_t key) : OnesTrainer(client, std::vector<uint64_t>{key}) {}
  ~OnesTrainer() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::atomic<int> acked{0};

 private:
  const std::vector<uint64_t> keys_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// `n` pushes of a gradient of ones to `key`, one after another, each within 10 s.
inline void PushOnes(PsClient& client, uint64_t key, int n) {
  const std::vector<float> ones(kDim, 1.0f);
  for (int i = 0; i < n; ++i) {
    Status s = client.Push(kTable, kDim, {&key, 1}, ones, 10s);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
}

// A forward as an attacker sends it straight to a backup (one key of ones, a push id of its
// own, lsn 1); what the backup answered.
inline Status SendForgedForward(RpcBackupLink& link, uint64_t epoch, uint64_t key) {
  PushRequest forged;
  forged.id = PushId{99, 1};
  forged.table_id = kTable;
  forged.dim = kDim;
  forged.keys = {key};
  forged.gradients.assign(kDim, 1.0f);
  std::promise<Status> forwarded;
  link.Forward(epoch, /*lsn=*/1, forged, [&](Status s) { forwarded.set_value(std::move(s)); });
  return forwarded.get_future().get();
}

}  // namespace bx::ps::testing

// The tests of this folder use these unqualified.
namespace bx::ps {
using testing::Cluster;
using testing::FirstValue;
using testing::kDim;
using testing::kTable;
using testing::kWaitLimit;
using testing::MakeClient;
using testing::MonitorLog;
using testing::PushOnes;
using testing::SendForgedForward;
}  // namespace bx::ps
