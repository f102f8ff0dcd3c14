// Server internals shared by server.cc and server_call.cc.
//
// Threads: requests arrive on the transports' I/O threads (ServerConnection::OnMessage). They run
// there (worker_threads == 0) or are queued for the worker pool. Responses may be sent from any
// thread. Impl::mutex guards the method table after Start, the connection set and the stats.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bx/rpc.h"
#include "rpc/frame.h"

namespace bx::rpc {

struct MethodEntry {
  std::string name;
  Handler handler;
};

// One accepted socket. Owned by the socket's handlers and by every ServerCall on it; the socket
// pointer is dropped when the socket ends, which breaks the handler <-> socket cycle.
struct ServerConnection : std::enable_shared_from_this<ServerConnection> {
  std::weak_ptr<Server::Impl> server;
  std::mutex mutex;
  std::shared_ptr<Socket> socket;  // guarded by mutex; null once closed
  std::string scheme;
  bool privileged_peer = false;  // the socket's, fixed at accept
  // Steady-clock nanoseconds of the last frame received or sent (the idle timeout's clock).
  std::atomic<int64_t> last_active_ns{NowNs()};

  static int64_t NowNs(Clock::time_point now = Clock::now()) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  }
  void OnMessage(Buffer frame);
  void OnClose();
  // Sends a frame if the socket is still open.
  void Send(Buffer frame);
  // Sends call `call_id`'s response. One the socket refuses, larger than the transport's message
  // limit or beyond its send queue (max_queued_bytes), is answered instead by a small
  // ResourceExhausted response saying so, sent at once or, when the queue is full, as soon as a
  // send completes: no call waits for an answer that will never come (server_owed.cc).
  void SendResponse(Buffer frame, uint64_t call_id);
  // Runs a request (on the I/O thread or a worker), unless its deadline has passed.
  void Execute(ServerCall call);
  static std::shared_ptr<ServerConnection> Of(const ServerCall& call) { return call.connection_; }

 private:
  // An error response not yet sent because the socket's send queue was full.
  struct Owed {
    uint64_t call_id;
    std::string why;
  };
  // Sends `frame`; returns the code of a refusal (the transports refuse synchronously), kOk when
  // the socket took it. A later completion, when OK, sends what is owed.
  StatusCode SendFrame(const std::shared_ptr<Socket>& socket, Buffer frame);
  void Owe(uint64_t call_id, std::string why);
  void OnSendCompleted();
  void FlushOwed();

  std::deque<Owed> owed_;     // guarded by mutex
  bool flushing_ = false;     // guarded by mutex
  uint64_t completions_ = 0;  // sends completed OK; guarded by mutex
};

struct BX_HIDDEN Server::Impl : std::enable_shared_from_this<Server::Impl> {
  ServerOptions options;
  std::vector<MethodEntry> methods;  // index + 1 == method id; fixed after Start
  std::unordered_map<std::string, uint32_t> method_ids;
  std::string method_table;  // HelloAck payload
  bool started = false;

  std::unique_ptr<Transport> rdma;
  std::unique_ptr<Transport> tcp;
  std::vector<std::unique_ptr<Listener>> listeners;
  ReplicaAddress address;

  mutable std::mutex mutex;
  std::unordered_set<std::shared_ptr<ServerConnection>> connections;  // guarded by mutex
  ServerStats stats;                                                  // guarded by mutex
  bool stopped = false;                                               // guarded by mutex

  // Worker pool (worker_threads > 0).
  std::mutex queue_mutex;
  std::condition_variable queue_changed;
  std::deque<ServerCall> queue;  // guarded by queue_mutex
  size_t queued_bytes = 0;       // request bytes in `queue`; guarded by queue_mutex
  bool stopping = false;         // guarded by queue_mutex
  std::vector<std::thread> workers;

  // Closes idle connections (options.idle_timeout > 0); woken by Stop through `idle_wake`.
  std::condition_variable idle_wake;  // with mutex and stopped
  std::thread idle_reaper;

  void Log(std::string_view line) const;
  void IdleReaperLoop();
  void Enqueue(ServerCall call);
  void WorkerLoop();
  void Count(uint64_t ServerStats::*field) {
    std::lock_guard lock(mutex);
    ++(stats.*field);
  }
};

}  // namespace bx::rpc
