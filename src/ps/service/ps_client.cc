#include <algorithm>
#include <bit>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "base/transfer_time.h"
#include "ps/service/ps_service.h"

namespace bx::ps {

// Runs delayed retries (push backoff) on one thread, so RPC callbacks never sleep.
class PsClientCore::Timer {
 public:
  Timer() : thread_([this] { Run(); }) {}
  ~Timer() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // False once stopping: the caller then finishes the work itself.
  bool After(std::chrono::microseconds delay, std::function<void()> fn) {
    std::lock_guard lock(mu_);
    if (stop_) return false;
    tasks_.emplace(rpc::Clock::now() + delay, std::move(fn));
    cv_.notify_all();
    return true;
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (tasks_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto first = tasks_.begin();
      if (first->first > rpc::Clock::now()) {
        cv_.wait_until(lock, first->first);
        continue;
      }
      std::function<void()> fn = std::move(first->second);
      tasks_.erase(first);
      lock.unlock();
      fn();
      lock.lock();
    }
    // Pending retries end with Aborted rather than silently, so nobody waits forever.
    std::multimap<rpc::Clock::time_point, std::function<void()>> left;
    left.swap(tasks_);
    lock.unlock();
    for (auto& [when, fn] : left) fn();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::multimap<rpc::Clock::time_point, std::function<void()>> tasks_;
  std::thread thread_;
};

struct PsClientCore::PushAttempt {
  uint32_t shard = 0;
  std::string bytes;  // the encoded push, resent unchanged (same PushId) by every retry
  rpc::Clock::time_point deadline;
  uint32_t replica = 0;
  uint32_t tried_this_round = 0;
  // Pushes stamped from the shard's session move to a new session when it expires; a push
  // with a caller-chosen id (PushToShard) is not renewable.
  bool renewable = false;
  uint64_t session = 0;
  // An attempt ended without a definite "not applied" (a timeout, a lost connection, a
  // primary deposed while the push waited): the push may have been applied under its id.
  bool maybe_applied = false;
  Status last_error;  // the last attempt's, for the error the push ends with
  std::function<void(Result<PushAck>)> done;
};

namespace {

uint64_t RandomBits() {
  std::random_device device;
  return uint64_t{device()} << 32 | device();
}

// A session id: a generation (the clock in seconds, at least `min_generation`) and 32 random
// bits (docs/PS.md "Exactly once").
uint64_t NewSessionId(uint32_t min_generation) {
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const uint64_t generation = std::max<uint64_t>(static_cast<uint64_t>(now), min_generation);
  return std::min<uint64_t>(generation, UINT32_MAX) << 32 | (RandomBits() & UINT32_MAX);
}

// Where the cluster file configures no failover for `shard`, what a push that timed out
// could not have had: a backup taking over from a stopped primary.
std::string NoFailoverHint(const ClusterSpec& spec, size_t shard) {
  if (spec.shards[shard].replicas.size() == 1) {
    return "; shard " + std::to_string(shard) +
           " has one replica, so nothing takes over while it is down (list more replicas for it "
           "in the cluster file, and a \"config_store\" for failover)";
  }
  if (spec.config_store.empty()) {
    return "; failover is not configured in the cluster file, so no backup takes over from a "
           "stopped primary (set \"config_store\" to an etcd URL, or run every replica with "
           "`bx ps serve --etcd URL`)";
  }
  return "";
}

}  // namespace

Result<std::unique_ptr<PsClientCore>> PsClientCore::Create(const ClusterSpec& spec,
                                                           PsClientOptions options) {
  if (spec.shards.empty()) return Status(StatusCode::kInvalidArgument, "cluster has no shards");
  std::string& secret = options.rpc.transport.auth_secret;
  if (secret.empty()) {
    secret = spec.secret;
  } else if (!spec.secret.empty() && secret != spec.secret) {
    return InvalidArgument("PsClientOptions: rpc.transport.auth_secret differs from the cluster's");
  }
  std::unique_ptr<PsClientCore> client(new PsClientCore());
  client->client_id_ = options.client_id;
  client->slowest_bytes_per_second_ = options.rpc.slowest_transfer_bytes_per_second;
  for (const TableConfig& t : spec.tables) {
    client->table_dims_[t.id] = t.dim;
    if (!t.name.empty()) client->table_names_.emplace_back(t.name, t.id);
  }
  if (client->client_id_ == 0) client->client_id_ = NewSessionId(0);
  const bool rdma = options.transport == "rdma";
  for (size_t i = 0; i < spec.shards.size(); ++i) {
    auto shard = std::make_unique<Shard>();
    std::vector<rpc::ReplicaAddress> addresses;
    for (const ReplicaSpec& replica : spec.shards[i].replicas) {
      rpc::ReplicaAddress address;
      (rdma ? address.rdma_url : address.tcp_url) = rdma ? replica.rdma : replica.tcp;
      if ((rdma ? address.rdma_url : address.tcp_url).empty()) {
        return Status(StatusCode::kInvalidArgument, "shard " + std::to_string(i) +
                                                        " has a replica without a " +
                                                        options.transport + " address");
      }
      addresses.push_back(address);
      BX_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Client> one,
                          rpc::Client::Create({address}, options.rpc));
      shard->replicas.push_back(std::move(one));
    }
    BX_ASSIGN_OR_RETURN(shard->reads, rpc::Client::Create(addresses, options.rpc));
    shard->no_failover_hint = NoFailoverHint(spec, i);
    shard->session.client_id = client->client_id_;
    shard->session.key = RandomBits();
    client->shards_.push_back(std::move(shard));
  }
  client->timer_ = std::make_unique<Timer>();
  return client;
}

PsClientCore::~PsClientCore() {
  // The timer first: its pending retries then find no timer and end with Aborted; then the RPC
  // clients, which fail their outstanding calls.
  timer_.reset();
  shards_.clear();
}

// One fetch across shards: each shard's part completes into `results`; the last assembles.
struct PsClientCore::FetchJoin {
  std::vector<ShardBatch> batches;
  std::vector<Result<rpc::Message>> results;
  size_t total_keys = 0;
  uint32_t table = 0;
  std::optional<uint32_t> table_dim;  // the cluster file's: the dim of a fetch of no keys
  std::atomic<size_t> remaining{0};
  std::function<void(Result<FetchResult>)> done;       // FetchAsync
  std::function<void(Result<FetchedRows>)> done_rows;  // FetchRowsAsync

  void Complete() {
    if (done_rows) return done_rows(Assemble(/*allow_view=*/true));
    Result<FetchedRows> rows = Assemble(/*allow_view=*/false);
    if (!rows.ok()) return done(rows.status());
    FetchResult out;
    out.dim = rows->dim();
    out.values = std::move(rows).value().TakeVector();
    done(std::move(out));
  }

  // The rows in request key order: a view on the reply when one shard answered every key in
  // order and its values can be read in place, else gathered (one copy per row).
  Result<FetchedRows> Assemble(bool allow_view) {
    std::vector<FetchResponseView> views;
    for (size_t b = 0; b < batches.size(); ++b) {
      if (!results[b].ok()) return results[b].status();
      const rpc::Message& m = *results[b];
      BX_ASSIGN_OR_RETURN(FetchResponseView view, DecodeFetchResponse({m.data(), m.size()}));
      if (view.key_count() != batches[b].keys.size()) {
        return Status(StatusCode::kDataLoss, "fetch response key count");
      }
      if (b > 0 && view.dim() != views[0].dim()) {
        return Status(StatusCode::kDataLoss, "shards disagree on dim");
      }
      views.push_back(view);
    }
    if (views.empty()) {
      // No keys, so no shard answered: the cluster file says the dim (callers shape (0, dim)).
      if (table_dim) return FetchedRows::Gathered({}, 0, *table_dim);
      return NotFound("fetch: no table " + std::to_string(table) + " in the cluster file");
    }
    const uint32_t dim = views[0].dim();
    if (allow_view && CanView(views)) {
      const auto* values = reinterpret_cast<const float*>(views[0].value_bytes().data());
      return FetchedRows::View(std::move(results[0]).value(), values, total_keys, dim);
    }
    std::vector<float> values(total_keys * dim);
    for (size_t b = 0; b < batches.size(); ++b) {
      for (size_t i = 0; i < batches[b].keys.size(); ++i) {
        views[b].CopyRow(i, {values.data() + size_t{batches[b].positions[i]} * dim, dim});
      }
    }
    return FetchedRows::Gathered(std::move(values), total_keys, dim);
  }

  // The wire is little-endian floats; a reply can be read in place when it holds every key in
  // request order and its values are aligned for float.
  bool CanView(const std::vector<FetchResponseView>& views) const {
    if constexpr (std::endian::native != std::endian::little) return false;
    if (views.size() != 1) return false;
    const auto address = reinterpret_cast<uintptr_t>(views[0].value_bytes().data());
    if (address % alignof(float) != 0) return false;
    const std::vector<uint32_t>& positions = batches[0].positions;
    for (size_t i = 0; i < positions.size(); ++i) {
      if (positions[i] != i) return false;
    }
    return true;
  }
};

void PsClientCore::FetchAsync(uint32_t table, std::span<const uint64_t> keys,
                              std::chrono::microseconds timeout,
                              std::function<void(Result<FetchResult>)> done) {
  auto join = std::make_shared<FetchJoin>();
  join->done = std::move(done);
  StartFetch(table, keys, timeout, std::move(join));
}

void PsClientCore::FetchRowsAsync(uint32_t table, std::span<const uint64_t> keys,
                                  std::chrono::microseconds timeout,
                                  std::function<void(Result<FetchedRows>)> done) {
  auto join = std::make_shared<FetchJoin>();
  join->done_rows = std::move(done);
  StartFetch(table, keys, timeout, std::move(join));
}

void PsClientCore::StartFetch(uint32_t table, std::span<const uint64_t> keys,
                              std::chrono::microseconds timeout, std::shared_ptr<FetchJoin> join) {
  join->batches = SplitByShard(keys, shard_count());
  for (size_t b = 0; b < join->batches.size(); ++b) {
    join->results.emplace_back(Status(StatusCode::kInternal, "not fetched"));
  }
  join->total_keys = keys.size();
  join->table = table;
  if (const auto dim = table_dims_.find(table); dim != table_dims_.end()) {
    join->table_dim = dim->second;
  }
  // A part whose reply would pass the message bound is refused here, as its shard would refuse
  // it, before any request is encoded or sent (an 8 Mi-key fetch of a wide table sent 64 MiB
  // of keys only to be refused after seconds).
  if (join->table_dim) {
    for (const ShardBatch& batch : join->batches) {
      Status s = CheckFetchResponseBounds(batch.keys.size(), *join->table_dim);
      if (s.ok()) continue;
      for (Result<rpc::Message>& result : join->results) result = s;
      return join->Complete();
    }
  }
  join->remaining = join->batches.size();
  if (join->batches.empty()) return join->Complete();
  const rpc::Clock::time_point deadline = rpc::Clock::now() + timeout;
  for (size_t b = 0; b < join->batches.size(); ++b) {
    FetchFromShard(table, join, b, deadline, 0);
  }
}

// One shard's part: first over `reads` (any replica); a replica that answers that it does not
// serve reads (Unavailable: deposed, out of the set, lease lapsed) is passed over, and the part
// is asked of each replica in turn, the one pushes last succeeded at first, until one answers
// or the deadline passes.
void PsClientCore::FetchFromShard(uint32_t table, std::shared_ptr<FetchJoin> join, size_t b,
                                  rpc::Clock::time_point deadline, uint32_t attempt) {
  const ShardBatch& batch = join->batches[b];
  Shard& shard = *shards_[batch.shard];
  auto finish = [join, b](Result<rpc::Message> result) {
    join->results[b] = std::move(result);
    if (join->remaining.fetch_sub(1) == 1) join->Complete();
  };
  const auto left =
      std::chrono::duration_cast<std::chrono::microseconds>(deadline - rpc::Clock::now());
  Result<rpc::Message> message = rpc::Message::Allocate(FetchRequestSize(batch.keys.size()));
  if (!message.ok()) return finish(message.status());
  if (Status s = EncodeFetchRequest({table, batch.keys}, {message->data(), message->size()});
      !s.ok()) {
    return finish(s);
  }
  const size_t n = shard.replicas.size();
  rpc::Client* client =
      attempt == 0
          ? shard.reads.get()
          : shard.replicas[(shard.primary.load(std::memory_order_relaxed) + attempt - 1) % n].get();
  const auto dim = table_dims_.find(table);
  const size_t reply_bytes =
      dim == table_dims_.end() ? 0 : FetchResponseSize(batch.keys.size(), dim->second);
  client->Call(
      kFetchMethod, std::move(message).value(),
      rpc::CallOptions{.timeout = left, .idempotent = true, .expected_response_bytes = reply_bytes},
      [this, table, join, b, deadline, attempt, n, finish](Result<rpc::Message> reply) {
        if (reply.ok() || reply.status().code() != StatusCode::kUnavailable || attempt >= n ||
            rpc::Clock::now() >= deadline) {
          return finish(std::move(reply));
        }
        FetchFromShard(table, join, b, deadline, attempt + 1);
      });
}

Result<FetchResult> PsClientCore::Fetch(uint32_t table, std::span<const uint64_t> keys,
                                        std::chrono::microseconds timeout) {
  std::promise<Result<FetchResult>> promise;
  auto future = promise.get_future();
  FetchAsync(table, keys, timeout,
             [&promise](Result<FetchResult> result) { promise.set_value(std::move(result)); });
  return future.get();
}

void PsClientCore::PushAsync(uint32_t table, uint32_t dim, std::span<const uint64_t> keys,
                             std::span<const float> gradients, std::chrono::microseconds timeout,
                             std::function<void(Status)> done) {
  if (gradients.size() != keys.size() * dim) {
    return done(Status(StatusCode::kInvalidArgument, "gradients must be keys * dim floats"));
  }
  std::vector<ShardBatch> batches = SplitByShard(keys, shard_count());
  if (batches.empty()) return done(Status::Ok());
  struct Join {
    std::mutex mu;
    size_t left;
    Status first_error;
    std::function<void(Status)> done;
  };
  auto join = std::make_shared<Join>();
  join->left = batches.size();
  join->done = std::move(done);
  for (ShardBatch& batch : batches) {
    PushRequest push;
    push.table_id = table;
    push.dim = dim;
    push.gradients.resize(batch.keys.size() * dim);
    for (size_t i = 0; i < batch.keys.size(); ++i) {
      std::copy_n(gradients.data() + size_t{batch.positions[i]} * dim, dim,
                  push.gradients.data() + i * dim);
    }
    push.keys = std::move(batch.keys);
    uint64_t session = 0;
    StampPush(*shards_[batch.shard], &push, &session);
    StartPush(batch.shard, std::move(push), timeout, session, [join](Result<PushAck> ack) {
      std::unique_lock lock(join->mu);
      if (!ack.ok() && join->first_error.ok()) join->first_error = ack.status();
      if (--join->left > 0) return;
      Status status = join->first_error;
      lock.unlock();
      join->done(status);
    });
  }
}

Status PsClientCore::Push(uint32_t table, uint32_t dim, std::span<const uint64_t> keys,
                          std::span<const float> gradients, std::chrono::microseconds timeout) {
  std::promise<Status> promise;
  auto future = promise.get_future();
  PushAsync(table, dim, keys, gradients, timeout,
            [&promise](Status status) { promise.set_value(std::move(status)); });
  return future.get();
}

void PsClientCore::StampPush(Shard& shard, PushRequest* push, uint64_t* session_number) {
  std::lock_guard lock(shard.session_mu);
  push->id = {shard.session.client_id, ++shard.session.last_sequence};
  push->client_key = shard.session.key;
  *session_number = shard.session.number;
}

void PsClientCore::PushToShard(uint32_t shard, PushRequest push, std::chrono::microseconds timeout,
                               std::function<void(Result<PushAck>)> done) {
  StartPush(shard, std::move(push), timeout, std::nullopt, std::move(done));
}

void PsClientCore::StartPush(uint32_t shard, PushRequest push, std::chrono::microseconds timeout,
                             std::optional<uint64_t> session,
                             std::function<void(Result<PushAck>)> done) {
  if (shard >= shards_.size()) {
    return done(InvalidArgument("no such shard " + std::to_string(shard) + " (the cluster has " +
                                std::to_string(shards_.size()) + " shards)"));
  }
  auto attempt = std::make_shared<PushAttempt>();
  attempt->shard = shard;
  attempt->renewable = session.has_value();
  attempt->session = session.value_or(0);
  attempt->bytes.resize(PushRequestSize(push.keys.size(), push.dim));
  if (Status s = EncodePushRequest(push, std::as_writable_bytes(std::span(attempt->bytes)));
      !s.ok()) {
    return done(s);
  }
  attempt->deadline = rpc::Clock::now() + timeout;
  attempt->replica = shards_[shard]->primary.load(std::memory_order_relaxed);
  attempt->done = std::move(done);
  TryPush(std::move(attempt));
}

// One attempt at the replica we believe is primary. "Not primary" or an unreachable replica
// moves on to the next one; a full round without success, or back-pressure, waits a little
// before going on, so a failover in progress is not hammered.
void PsClientCore::TryPush(std::shared_ptr<PushAttempt> attempt) {
  auto remaining =
      std::chrono::duration_cast<std::chrono::microseconds>(attempt->deadline - rpc::Clock::now());
  Shard& shard = *shards_[attempt->shard];
  if (remaining.count() <= 0) {
    std::string text =
        "push to shard " + std::to_string(attempt->shard) + " not acknowledged in time";
    if (!attempt->last_error.ok())
      text += " (last attempt: " + attempt->last_error.ToString() + ")";
    return attempt->done(Status(StatusCode::kDeadlineExceeded, text + shard.no_failover_hint));
  }
  Result<rpc::Message> message = rpc::Message::CopyOf(attempt->bytes);
  if (!message.ok()) return attempt->done(message.status());
  // One RPC attempt per try: where to retry is this function's decision (the RPC client of one
  // replica cannot know another replica became primary). An attempt gets 500 ms plus the time
  // its bytes take at the slowest rate a live peer moves them, twice (to the primary, and from
  // it to its backups): a 64 MiB push capped at 500 ms was sent again and again, each copy
  // adding to the load that made it late.
  const std::chrono::microseconds attempt_time =
      std::chrono::microseconds(500000) +
      2 * TransferTime(attempt->bytes.size(), slowest_bytes_per_second_);
  rpc::CallOptions options{
      .timeout = std::min(remaining, attempt_time), .idempotent = true, .max_attempts = 1};
  shard.replicas[attempt->replica]->Call(
      kPushMethod, std::move(message).value(), options,
      [this, attempt](Result<rpc::Message> reply) {
        Shard& shard = *shards_[attempt->shard];
        if (reply.ok()) {
          Result<PushAck> ack = DecodePushAck({reply->data(), reply->size()});
          if (ack.ok()) shard.primary.store(attempt->replica, std::memory_order_relaxed);
          if (ack.ok() && ack->session_expired) {
            return RenewSessionAndRetry(attempt, ack->min_generation);
          }
          return attempt->done(std::move(ack));
        }
        attempt->last_error = reply.status();
        StatusCode code = reply.status().code();
        if (code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ||
            code == StatusCode::kDataLoss) {
          return attempt->done(reply.status());  // the push itself is bad: retrying cannot help
        }
        // Not primary, and back-pressure, are refusals that applied nothing; anything else
        // leaves the push's fate open until an ack names it.
        if (code != StatusCode::kFailedPrecondition && code != StatusCode::kResourceExhausted) {
          attempt->maybe_applied = true;
        }
        std::chrono::microseconds delay{0};
        if (code == StatusCode::kResourceExhausted) {
          delay = std::chrono::milliseconds(1);
        } else {
          push_failovers_.fetch_add(1, std::memory_order_relaxed);
          attempt->replica = (attempt->replica + 1) % shard.replicas.size();
          if (++attempt->tried_this_round >= shard.replicas.size()) {
            attempt->tried_this_round = 0;
            delay = std::chrono::milliseconds(5);
          }
        }
        if (delay.count() == 0) return TryPush(attempt);
        if (!timer_ || !timer_->After(delay, [this, attempt] { TryPush(attempt); })) {
          attempt->done(Status(StatusCode::kAborted, "push client shutting down"));
        }
      });
}

void PsClientCore::RenewSessionAndRetry(std::shared_ptr<PushAttempt> attempt,
                                        uint32_t min_generation) {
  Shard& shard = *shards_[attempt->shard];
  const std::string which = "shard " + std::to_string(attempt->shard) +
                            " no longer knows this client's session (evicted from its dedup "
                            "record, or its id bound to another client's key)";
  if (!attempt->renewable) return attempt->done(Status(StatusCode::kFailedPrecondition, which));
  if (attempt->maybe_applied) {
    // It may have been applied and then forgotten: sending it again could apply it twice.
    return attempt->done(Status(StatusCode::kAborted,
                                "push outcome unknown: " + which +
                                    " and an earlier attempt of this push may have been applied"));
  }
  PushId id;
  uint64_t key;
  {
    std::lock_guard lock(shard.session_mu);
    Session& session = shard.session;
    if (session.number == attempt->session) {  // the first of its pushes to learn it expired
      const uint64_t old_id = session.client_id;
      do {
        session.client_id = NewSessionId(min_generation);
      } while (session.client_id == old_id);
      session.key = RandomBits();
      session.last_sequence = 0;
      ++session.number;
      session_renewals_.fetch_add(1, std::memory_order_relaxed);
    }
    id = {session.client_id, ++session.last_sequence};
    key = session.key;
    attempt->session = session.number;
  }
  if (Status s = RestampPushRequest(std::as_writable_bytes(std::span(attempt->bytes)), id, key);
      !s.ok()) {
    return attempt->done(s);
  }
  TryPush(std::move(attempt));
}

PsClientCore::Session PsClientCore::session(uint32_t shard) const {
  std::lock_guard lock(shards_.at(shard)->session_mu);
  return shards_[shard]->session;
}

PsClientStats PsClientCore::stats() const {
  PsClientStats out;
  out.push_failovers = push_failovers_.load();
  out.session_renewals = session_renewals_.load();
  auto add = [&out](const rpc::Client& client) {
    rpc::ClientStats s = client.stats();
    out.rpc.calls += s.calls;
    out.rpc.ok += s.ok;
    for (auto& [code, n] : s.errors) out.rpc.errors[code] += n;
    out.rpc.attempts += s.attempts;
    out.rpc.retries += s.retries;
    out.rpc.retries_throttled += s.retries_throttled;
    out.rpc.fallbacks_to_tcp += s.fallbacks_to_tcp;
    out.rpc.returns_to_rdma += s.returns_to_rdma;
    out.rpc.replica_state_changes += s.replica_state_changes;
    out.rpc.connections_opened += s.connections_opened;
    out.rpc.connections_failed += s.connections_failed;
    out.rpc.heartbeats_sent += s.heartbeats_sent;
    out.rpc.timer_wakeups += s.timer_wakeups;
    for (auto& [method, h] : s.latency) out.rpc.latency[method].Merge(h);
  };
  for (const auto& shard : shards_) {
    add(*shard->reads);
    for (const auto& replica : shard->replicas) add(*replica);
  }
  return out;
}

}  // namespace bx::ps
