// A C++ program built against the installed package that names its table as the cluster file
// does ("emb", table 1 of tools/test-install.sh's cluster: constant 1.0 rows, SGD at learning
// rate 1): it pushes and fetches by name, and an unknown name is NotFound naming "emb" rather
// than some other table. A literal 0 is still table id 0.
//
//   table_names CLUSTER_FILE
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bx/init.h"
#include "bx/ps/client.h"
#include "bx/ps/cluster.h"

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "table_names: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: table_names CLUSTER_FILE");
  bx::Result<bx::ps::ClusterSpec> spec = bx::ps::LoadClusterFile(argv[1]);
  if (!spec.ok()) return Fail(spec.status().ToString());
  bx::InitOptions init;
  init.rdma = spec->transport == "rdma";
  if (bx::Status s = bx::Init(init); !s.ok()) return Fail(s.ToString());
  bx::ps::PsClientOptions options;
  options.transport = spec->transport;
  auto created = bx::ps::PsClient::Create(*spec, options);
  if (!created.ok()) return Fail(created.status().ToString());
  bx::ps::PsClient& client = **created;
  const auto timeout = std::chrono::seconds(5);

  bx::Result<uint32_t> id = client.TableId("emb");
  if (!id.ok() || *id != 1) return Fail("TableId(\"emb\") is not 1: " + id.status().ToString());

  // Keys no other program of test-install.sh touches.
  const std::vector<uint64_t> keys = {1ull << 40, (1ull << 40) + 1, (1ull << 40) + 2};
  const std::vector<float> gradients(keys.size() * 8, 0.5f);
  if (bx::Status s = client.Push("emb", 8, keys, gradients, timeout); !s.ok()) {
    return Fail("push by name: " + s.ToString());
  }
  bx::Result<bx::ps::FetchResult> rows = client.Fetch("emb", keys, timeout);
  if (!rows.ok()) return Fail("fetch by name: " + rows.status().ToString());
  for (float v : rows->values) {
    if (v != 0.5f) return Fail("fetched " + std::to_string(v) + ", expected 1.0 - 0.5");
  }
  bx::Result<bx::ps::FetchedRows> view = client.FetchRows(std::string("emb"), keys, timeout);
  if (!view.ok() || view->rows() != keys.size() || view->dim() != 8) {
    return Fail("FetchRows by name: " + view.status().ToString());
  }

  bx::Result<uint32_t> unknown = client.TableId("users");
  if (unknown.status().code() != bx::StatusCode::kNotFound ||
      unknown.status().message().find("\"emb\"") == std::string::npos) {
    return Fail("TableId(\"users\") does not name the known tables: " +
                unknown.status().ToString());
  }
  if (client.Fetch("users", keys, timeout).status().message() != unknown.status().message() ||
      client.Push("users", 8, keys, gradients, timeout).code() != bx::StatusCode::kNotFound) {
    return Fail("an unknown name reached a table");
  }
  bx::Result<bx::ps::FetchResult> zero = client.Fetch(0, {}, timeout);  // table id 0
  if (zero.status().message().find("no table 0") == std::string::npos) {
    return Fail("Fetch(0, ...) is not table id 0: " + zero.status().ToString());
  }
  std::printf("table_names: pushed and fetched \"emb\" by name; %s\n",
              unknown.status().ToString().c_str());
  return 0;
}
