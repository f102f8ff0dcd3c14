// A parameter-server client: fetches embedding rows, pushes gradients, fetches again and checks
// that the server applied the push.
//
//   ps_client cluster.json [table=1]
//
// The cluster (bx ps serve --cluster cluster.json --shard S --replica R per replica) must serve
// `table` as an embedding table with the SGD optimizer at learning rate 1 (so that a pushed
// gradient g moves every value by exactly -g).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bx/init.h"
#include "bx/log.h"
#include "bx/ps/client.h"
#include "bx/ps/cluster.h"

namespace {

int Fail(const bx::Status& status) {
  std::fprintf(stderr, "ps_client: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s CLUSTER_FILE [table]\n", argv[0]);
    return 2;
  }
  const uint32_t table = argc == 3 ? static_cast<uint32_t>(std::atoi(argv[2])) : 1;
  bx::Result<bx::ps::ClusterSpec> spec = bx::ps::LoadClusterFile(argv[1]);
  if (!spec.ok()) return Fail(spec.status());
  bx::SetLogSink(bx::StderrLogSink());  // the library says nothing unless given a sink
  bx::InitOptions init;
  init.rdma = spec->transport == "rdma";
  if (bx::Status s = bx::Init(init); !s.ok()) return Fail(s);

  bx::ps::PsClientOptions options;
  options.transport = spec->transport;
  auto client = bx::ps::PsClient::Create(*spec, options);
  if (!client.ok()) return Fail(client.status());

  // Keys spread over every shard; one fetch (and one push) makes one call per shard.
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 64; ++k) keys.push_back(k * 7919 + 1);
  const auto timeout = std::chrono::seconds(5);
  auto before = (*client)->Fetch(table, keys, timeout);
  if (!before.ok()) return Fail(before.status());

  std::vector<float> gradients(before->values.size(), 0.25f);
  if (bx::Status s = (*client)->Push(table, before->dim, keys, gradients, timeout); !s.ok()) {
    return Fail(s);
  }
  auto after = (*client)->Fetch(table, keys, timeout);
  if (!after.ok()) return Fail(after.status());
  for (size_t i = 0; i < after->values.size(); ++i) {
    if (std::fabs(after->values[i] - (before->values[i] - 0.25f)) > 1e-6f) {
      return Fail(bx::DataLoss("value " + std::to_string(i) + " was not updated by the push"));
    }
  }
  std::printf("fetched, pushed and fetched %zu keys x %u floats over %u shards (%s)\n", keys.size(),
              before->dim, (*client)->shard_count(), spec->transport.c_str());
  return 0;
}
