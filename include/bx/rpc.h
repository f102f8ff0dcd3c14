// bexpress RPC: calls over the transport's sockets, with the recovery the NIC cannot do itself
// (paper sections 3 and 7): deadlines, retries, replica selection, connection health and
// RDMA-to-TCP fallback. docs/RPC.md describes the design; this header is the whole public API.
//
// In short:
//   Server: AddMethod("ps.Fetch", handler) ... Start({"rdma://0.0.0.0:7000",
//   "tcp://0.0.0.0:7001"}). Client: one per logical service (a replica set):
//   Client::Create({replica, replica}, options),
//           then Call("ps.Fetch", request, {.timeout = 20ms, .idempotent = true}, callback).
//   FanOut: N sub-calls (to the same or different clients) under one deadline.
//
// Payloads are Messages: one bemalloc Buffer with room for the RPC header in front, so a request
// or a response goes to the transport without a copy. (Exception: a call that may be retried keeps
// a copy of its request, because the transport frees a buffer once it has left; see docs/RPC.md.)
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bx/buffer.h"
#include "bx/export.h"
#include "bx/status.h"
#include "bx/transport.h"

namespace bx::rpc {

using Clock = std::chrono::steady_clock;

// A request or response payload: a bemalloc Buffer whose first kHeaderBytes are reserved for the
// RPC header. Move-only; one thread at a time, may move between threads (as Buffer).
class BX_EXPORT Message {
 public:
  static constexpr size_t kHeaderBytes = 32;

  Message() = default;
  // A payload of `size` bytes (contents undefined).
  static Result<Message> Allocate(size_t size);
  // A payload holding a copy of `bytes`.
  static Result<Message> CopyOf(std::string_view bytes);

  std::byte* data() { return buffer_.data() + kHeaderBytes; }
  const std::byte* data() const { return buffer_.data() + kHeaderBytes; }
  size_t size() const { return buffer_ ? buffer_.size() - kHeaderBytes : 0; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data()), size()}; }
  explicit operator bool() const { return static_cast<bool>(buffer_); }
  // Changes the payload size within the allocated capacity (false when it does not fit).
  bool Resize(size_t size);

 private:
  friend class MessageFrame;  // the RPC layer's access to the header in front (src/rpc/frame.h)
  explicit Message(Buffer frame) : buffer_(std::move(frame)) {}
  Buffer buffer_;
};

// Where one replica listens: its rdma:// and tcp:// urls (either may be empty, not both). The
// client prefers rdma and falls back to tcp on the same replica. Text form, as Parse() accepts and
// ToString() prints: "rdma://host:7000,tcp://host:7001", or "host:7000,7001" (rdma port, tcp port).
struct BX_EXPORT ReplicaAddress {
  std::string rdma_url;
  std::string tcp_url;
  static Result<ReplicaAddress> Parse(std::string_view text);
  std::string ToString() const;
};

// ---------------------------------------------------------------------------------------------
// Latency histogram: log-linear buckets (8 per power of two, < 9% error) from 1 us to ~50 days;
// a latency beyond that counts in an overflow bucket, whose percentiles are MaxUs().
// Thread-compatible.
class BX_EXPORT LatencyHistogram {
 public:
  void Record(std::chrono::nanoseconds latency);
  void Merge(const LatencyHistogram& other);
  uint64_t count() const { return count_; }
  // The latency below which `fraction` (0..1) of the samples lie, in microseconds (bucket upper
  // edge); 0 when empty.
  double PercentileUs(double fraction) const;
  double MeanUs() const { return count_ ? sum_us_ / count_ : 0; }
  double MaxUs() const { return max_us_; }

 private:
  // The library's one log-linear scheme (src/base/log_linear_buckets.h, which a public header
  // does not include): 42 octaves of 8 from 1 us, plus its underflow bucket (unused: a latency
  // counts as at least 1 us) and overflow bucket. common.cc checks that the scheme has kBuckets.
  static constexpr int kBuckets = 42 * 8 + 2;
  uint64_t buckets_[kBuckets] = {};
  uint64_t count_ = 0;
  double sum_us_ = 0;
  double max_us_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Server side.

struct BX_EXPORT ServerStats {
  uint64_t requests = 0;         // request frames received
  uint64_t executed = 0;         // handlers started
  uint64_t dropped_expired = 0;  // requests not executed because their deadline had passed
  uint64_t late_responses = 0;   // responses not sent because the caller had given up
  // Responses the transport refused (larger than its message limit, or the connection's send
  // queue full); each caller got a ResourceExhausted answer saying why instead.
  uint64_t responses_refused = 0;
  // Requests answered ResourceExhausted because the worker queue held max_queued_request_bytes.
  uint64_t refused_busy = 0;
  uint64_t unknown_method = 0;
  uint64_t heartbeats = 0;
  uint64_t connections = 0;  // accepted, since Start
  uint64_t idle_closed = 0;  // connections closed after ServerOptions::idle_timeout
  std::map<std::string, LatencyHistogram> handler_latency;  // per method, handler start->respond
};

class Server;
struct ServerConnection;

// One request on the server. Move-only. Respond() or Fail() once, from any thread, inline or
// later; destroying a call that was not answered answers it with Internal.
class BX_EXPORT ServerCall {
 public:
  ServerCall(ServerCall&&) noexcept;
  ServerCall& operator=(ServerCall&&) = delete;
  ServerCall(const ServerCall&) = delete;
  ~ServerCall();

  const std::string& method() const;
  // The caller's deadline in this process's clock (steady_clock::time_point::max() when none).
  Clock::time_point deadline() const { return deadline_; }
  bool expired() const { return Clock::now() >= deadline_; }
  bool idempotent() const { return idempotent_; }
  std::string_view transport() const;  // "rdma" or "tcp"
  // The caller proved TransportOptions::privileged_secret when it connected.
  bool privileged_peer() const;
  Message& request() { return request_; }

  void Respond(Message response);
  void Fail(const Status& status);

 private:
  friend struct ServerConnection;
  ServerCall(std::shared_ptr<ServerConnection> connection, uint64_t call_id, uint32_t method_index,
             Clock::time_point deadline, bool idempotent, Message request);
  void Finish(const Status& status, Message response);

  std::shared_ptr<ServerConnection> connection_;
  uint64_t call_id_ = 0;
  uint32_t method_index_ = 0;
  Clock::time_point deadline_;
  Clock::time_point started_;
  bool idempotent_ = false;
  bool answered_ = false;
  Message request_;
};

using Handler = std::function<void(ServerCall call)>;

struct BX_EXPORT ServerOptions {
  // 0: handlers run inline on the transport's I/O thread (they must not block); N > 0: on a pool
  // of N worker threads, fed in arrival order.
  int worker_threads = 0;
  // With workers: request bytes waiting for one. A request that would take the queue above
  // this is answered at once with ResourceExhausted ("server busy"); one request of any size is
  // taken into an empty queue. 0: unbounded.
  size_t max_queued_request_bytes = size_t{256} << 20;
  TransportOptions transport;
  // A connection over which nothing was received or sent for this long is closed, as a peer
  // that holds connections open and silent would otherwise keep them for ever. Clients send
  // heartbeats on idle connections (ClientOptions::heartbeat_interval), so keep this far above
  // that. 0: never.
  std::chrono::milliseconds idle_timeout{0};
  // Receives one line per notable event; default: stderr.
  std::function<void(std::string_view)> log;
};

// Thread-safety: AddMethod before Start; everything else from any thread.
class BX_EXPORT Server {
 public:
  static Result<std::unique_ptr<Server>> Create(ServerOptions options = {});
  ~Server();  // Stop()

  // Registers `name` (unique). Method ids are given in registration order and sent to each client
  // when it connects.
  Status AddMethod(std::string name, Handler handler);
  // Listens on each url (e.g. "rdma://0.0.0.0:7000", "tcp://0.0.0.0:7001"; port 0: any free).
  Status Start(const std::vector<std::string>& urls);
  // Listen on rdma://host:0 and tcp://host:0; address() then says where.
  Status StartOnAnyPorts(const std::string& host = "127.0.0.1");
  // Bound urls, rdma and tcp as available.
  ReplicaAddress address() const;
  // Closes listeners and connections, stops workers. Idempotent.
  void Stop();
  ServerStats stats() const;

 private:
  struct Impl;  // src/rpc/server_impl.h
  friend class ServerCall;
  friend struct ServerConnection;
  explicit Server(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Client side.

struct BX_EXPORT CallOptions {
  // Deadline relative to the call; also propagated to the server.
  std::chrono::microseconds timeout = std::chrono::seconds(1);
  // A call marked idempotent may be retried after its request may have reached a server. Any call
  // is retried when its request provably never left (no connection could take it).
  bool idempotent = false;
  // Attempts at most (first try included); 0: ClientOptions::retry.max_attempts.
  int max_attempts = 0;
  // How large the response may be (0: small). A response is delivered whole, after everything
  // sent before it on its connection, heartbeat answers included: while a large one is awaited,
  // the connection's silence is allowed to last as long as the response takes to arrive at
  // ClientOptions::slowest_transfer_bytes_per_second before it is declared dead.
  size_t expected_response_bytes = 0;
};

enum class ReplicaPolicy { kRoundRobin, kLeastOutstanding, kPowerOfTwoChoices };

struct BX_EXPORT RetryOptions {
  int max_attempts = 3;
  std::chrono::microseconds initial_backoff = std::chrono::milliseconds(2);
  std::chrono::microseconds max_backoff = std::chrono::milliseconds(200);
  double multiplier = 2.0;
  // Backoff b is drawn uniformly from [b * (1 - jitter), b].
  double jitter = 0.5;
  // Retry budget (token bucket): each call adds budget_ratio tokens, each retry takes one;
  // budget_max_tokens caps (and is the initial) balance. 0.1 = retries add at most ~10% load.
  double budget_ratio = 0.1;
  double budget_max_tokens = 10;
};

struct BX_EXPORT ClientOptions {
  ReplicaPolicy policy = ReplicaPolicy::kLeastOutstanding;
  RetryOptions retry;
  // Connection set-up (transport connect + method-table exchange) per transport.
  std::chrono::milliseconds connect_timeout{1000};
  // A connection that received nothing for heartbeat_interval sends a heartbeat; one that received
  // nothing for heartbeat_timeout is declared dead. The peer answers a heartbeat only once it has
  // received what was sent before it, and its answer follows what it sends before it: so while
  // a large request is being sent, or a large response is awaited
  // (CallOptions::expected_response_bytes), the allowance grows by the time those bytes take at
  // slowest_transfer_bytes_per_second. A connection moving a large message is not dead; one that
  // moves nothing is found out as before.
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds heartbeat_timeout{500};
  // The slowest rate a live peer is assumed to move a large message at (copies, a loaded host,
  // a sanitizer build): 16 MiB/s gives a 64 MiB message 4 s more, a 1 GiB one about a minute.
  size_t slowest_transfer_bytes_per_second = size_t{16} << 20;
  // Consecutive call timeouts on a connection, with no response in between, that declare it dead.
  int max_consecutive_timeouts = 8;
  // How often a down replica is probed (reconnected), and how often a replica that fell back to
  // TCP tries RDMA again.
  std::chrono::milliseconds probe_interval{200};
  std::chrono::milliseconds rdma_retry_interval{1000};
  TransportOptions transport;
  // Transports to use instead of creating them from the registry (not owned; must outlive the
  // client). Null: created with transport::CreateTransport("rdma"/"tcp").
  Transport* rdma_transport = nullptr;
  Transport* tcp_transport = nullptr;
  std::function<void(std::string_view)> log;  // default: stderr
  uint64_t seed = 0;                          // jitter and power-of-two choices; 0: random
};

enum class ReplicaState { kConnecting, kUp, kDown };
BX_EXPORT std::string_view ReplicaStateName(ReplicaState state);

struct BX_EXPORT ReplicaInfo {
  ReplicaAddress address;
  ReplicaState state = ReplicaState::kConnecting;
  std::string transport;  // scheme of the connection in use ("" when none)
  bool on_tcp_fallback = false;
  int outstanding = 0;
  uint64_t calls = 0;  // attempts sent to it
};

struct BX_EXPORT ClientStats {
  uint64_t calls = 0;  // Call() invocations
  uint64_t ok = 0;
  std::map<StatusCode, uint64_t> errors;  // finished calls by error kind
  uint64_t attempts = 0;                  // requests sent (first tries and retries)
  uint64_t retries = 0;
  uint64_t retries_throttled = 0;      // retries refused by the budget
  uint64_t fallbacks_to_tcp = 0;       // moves rdma -> tcp (per replica)
  uint64_t returns_to_rdma = 0;        // moves tcp -> rdma
  uint64_t replica_state_changes = 0;  // up <-> down
  uint64_t connections_opened = 0;
  uint64_t connections_failed = 0;  // connections declared dead or closed by error
  uint64_t heartbeats_sent = 0;
  // Times the client's timer thread woke (heartbeats, probes, deadlines, retries): what keeping
  // the client's connections watched costs a host whose cores are busy.
  uint64_t timer_wakeups = 0;
  std::map<std::string, LatencyHistogram> latency;  // per method, successful calls
  std::vector<ReplicaInfo> replicas;
};

using Callback = std::function<void(Result<Message>)>;

// A client of one logical service: a set of replicas that serve the same methods.
// Thread-safety: all methods may be called from any thread. Callbacks run on a transport I/O
// thread or the client's timer thread and must not block; they may call Call().
class BX_EXPORT Client {
 public:
  static Result<std::unique_ptr<Client>> Create(std::vector<ReplicaAddress> replicas,
                                                ClientOptions options = {});
  // Fails outstanding calls with Aborted (their callbacks run) and closes connections.
  ~Client();

  // Starts a call; `done` runs exactly once with the response or the error, no later than the
  // deadline plus a few milliseconds of timer slack.
  void Call(std::string_view method, Message request, const CallOptions& options, Callback done);
  std::future<Result<Message>> Call(std::string_view method, Message request,
                                    const CallOptions& options = {});

  // Waits until some replica can take a call (connected and methods known) or `timeout` passes.
  Status WaitReady(std::chrono::milliseconds timeout);
  ClientStats stats() const;

 private:
  struct Core;  // src/rpc/client_core.h
  explicit Client(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  std::shared_ptr<Core> core_;
};

// ---------------------------------------------------------------------------------------------
// Fan-out: N sub-calls under one deadline; the result comes when all have ended (each ends by
// the deadline), with every sub-call's result and the indices of those that failed.

struct BX_EXPORT SubCall {
  Client* client = nullptr;
  std::string method;
  Message request;
  bool idempotent = false;
};

struct BX_EXPORT FanOutResult {
  std::vector<Result<Message>> results;  // in sub-call order
  std::vector<size_t> failed;            // indices of sub-calls that ended in error
  bool all_ok() const { return failed.empty(); }
};

BX_EXPORT void FanOut(std::vector<SubCall> calls, std::chrono::microseconds timeout,
                      std::function<void(FanOutResult)> done);
BX_EXPORT std::future<FanOutResult> FanOut(std::vector<SubCall> calls,
                                           std::chrono::microseconds timeout);

}  // namespace bx::rpc
