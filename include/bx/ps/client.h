// The parameter-server client: fetches embedding rows and pushes gradients to a sharded,
// replicated cluster (docs/PS.md) described by a ClusterSpec (bx/ps/cluster.h).
//
//   auto spec = bx::ps::LoadClusterFile("cluster.json");
//   auto client = bx::ps::PsClient::Create(*spec);
//   auto rows = (*client)->Fetch("user", keys, std::chrono::milliseconds(50));
//   bx::Status s = (*client)->Push("user", dim, keys, gradients, std::chrono::seconds(1));
//
// A table is named by its id or by its name in the cluster file; the name overloads resolve the
// name (TableId) and call the id ones, so a loop can resolve once and use the id.
//
// Keys are spread over shards by ShardOfKey; a fetch or push touching several shards makes one
// call per shard, all under the one deadline. Reads go to any replica of a shard. A push is
// applied exactly once: each shard's part carries an id, and a part whose replica failed or is
// no longer primary is retried with the same id on another replica until acknowledged.
//
// Threads: every method may be called from any thread. Callbacks run on a transport I/O thread
// or the client's timer thread and must not block. bx::Init must have been called.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bx/export.h"
#include "bx/ps/cluster.h"
#include "bx/rpc.h"
#include "bx/status.h"

namespace bx::ps {

class PsClientCore;  // the implementation, inside the library

struct BX_EXPORT PsClientOptions {
  // "rdma" or "tcp": which url of each replica to use (the other is not used, so that a run
  // measures one transport).
  std::string transport = "rdma";
  // rpc.transport.auth_secret, when empty, is the cluster's (ClusterSpec::secret); a different
  // one than the cluster's is refused.
  rpc::ClientOptions rpc;
  // The id of this client's first session with each shard (docs/PS.md "Exactly once"): its
  // upper 32 bits are a generation (a clock in seconds), the lower 32 any number. 0: the
  // current time and 32 random bits. A shard that forgets the session, or finds the id taken by
  // another client, makes the client start a new one with a fresh id.
  uint64_t client_id = 0;
};

struct BX_EXPORT FetchResult {
  uint32_t dim = 0;
  std::vector<float> values;  // keys.size() * dim, row i for key i
};

// The rows of one fetch, where possible without a copy: when every key fell on one shard (and
// the host is little-endian, as the wire is), data() points into the received reply, whose
// bemalloc buffer this object keeps alive; otherwise the shards' rows were gathered into one
// array in key order (one copy, which scattering replies into request order needs). Move-only;
// may be destroyed on any thread, after the client that fetched it.
class BX_EXPORT FetchedRows {
 public:
  FetchedRows() = default;
  // A view on `reply` (it must hold the rows at `values`, 4-byte aligned).
  static FetchedRows View(rpc::Message reply, const float* values, size_t rows, uint32_t dim);
  // Rows gathered into an array of their own.
  static FetchedRows Gathered(std::vector<float> values, size_t rows, uint32_t dim);

  uint32_t dim() const { return dim_; }
  size_t rows() const { return rows_; }
  const float* data() const { return data_; }  // rows() * dim() floats, row i for key i
  bool copied() const { return !reply_; }      // false: data() is inside the received reply
  // The received reply's payload that data() points into (empty when copied()).
  std::span<const std::byte> reply_bytes() const {
    if (!reply_) return {};
    return {reply_.data(), reply_.size()};
  }
  std::vector<float> TakeVector() &&;  // the rows as a vector (a copy for a view)

 private:
  rpc::Message reply_;
  std::vector<float> gathered_;
  const float* data_ = nullptr;
  size_t rows_ = 0;
  uint32_t dim_ = 0;
};

struct BX_EXPORT PsClientStats {
  uint64_t push_failovers = 0;  // a push moved to another replica of its shard
  // A shard no longer knew this client's session (evicted from its dedup record, or the id
  // taken by another key) and a new one was started.
  uint64_t session_renewals = 0;
  rpc::ClientStats rpc;  // summed over every rpc::Client of this client
};

class BX_EXPORT PsClient {
 public:
  // Connects to every replica of every shard of `spec` (connections come up in the background;
  // calls made before wait for them within their deadline).
  static Result<std::unique_ptr<PsClient>> Create(const ClusterSpec& spec,
                                                  PsClientOptions options = {});
  // Fails outstanding calls with Aborted (their callbacks run) and closes connections.
  ~PsClient();

  // The id of the table the cluster file names `name`: NotFound (listing the names it has) for a
  // name it lacks, InvalidArgument for "". No I/O.
  Result<uint32_t> TableId(std::string_view name) const;

  // Fetches the rows of `keys` from `table`; `done` runs once with the rows or the first error.
  // No keys asks no shard: the rows are none, of the table's dim in the cluster file (NotFound
  // for a table not in it).
  void FetchAsync(uint32_t table, std::span<const uint64_t> keys, std::chrono::microseconds timeout,
                  std::function<void(Result<FetchResult>)> done);
  Result<FetchResult> Fetch(uint32_t table, std::span<const uint64_t> keys,
                            std::chrono::microseconds timeout);
  // By name: TableId's error, or Fetch of its id. Fetch(0, ...) is table id 0 (an integer
  // argument is a better match for uint32_t than a null pointer for string_view).
  Result<FetchResult> Fetch(std::string_view table, std::span<const uint64_t> keys,
                            std::chrono::microseconds timeout);
  // As FetchAsync, the rows left in the reply where they can be (FetchedRows): for callers that
  // hand the memory on (the Python module's NumPy arrays) rather than copy it.
  void FetchRowsAsync(uint32_t table, std::span<const uint64_t> keys,
                      std::chrono::microseconds timeout,
                      std::function<void(Result<FetchedRows>)> done);
  Result<FetchedRows> FetchRows(uint32_t table, std::span<const uint64_t> keys,
                                std::chrono::microseconds timeout);
  Result<FetchedRows> FetchRows(std::string_view table, std::span<const uint64_t> keys,
                                std::chrono::microseconds timeout);

  // Pushes `gradients` (keys.size() * dim floats, row i for key i) into `table`; `done` gets OK
  // once every shard acknowledged its part, or the error that stopped one by `timeout`.
  void PushAsync(uint32_t table, uint32_t dim, std::span<const uint64_t> keys,
                 std::span<const float> gradients, std::chrono::microseconds timeout,
                 std::function<void(Status)> done);
  Status Push(uint32_t table, uint32_t dim, std::span<const uint64_t> keys,
              std::span<const float> gradients, std::chrono::microseconds timeout);
  Status Push(std::string_view table, uint32_t dim, std::span<const uint64_t> keys,
              std::span<const float> gradients, std::chrono::microseconds timeout);

  uint64_t client_id() const;
  uint32_t shard_count() const;
  PsClientStats stats() const;

 private:
  friend class PsInternals;  // the library's own layers and tests (src/ps/service/ps_internals.h)
  explicit PsClient(std::unique_ptr<PsClientCore> core);
  std::unique_ptr<PsClientCore> core_;
};

}  // namespace bx::ps
