// Client internals: calls, replicas, connections, and the two threads that drive them.
//
// Threads and locking: one mutex (Core::mutex) guards everything below it. Three kinds of thread
// enter: callers (Call, stats), transport I/O threads (messages, closes, send failures), and the
// client's own two threads: the timer thread (deadlines, backoff, heartbeats, probes) and the
// connector thread (blocking transport Connect calls, one at a time). Nothing that may call back
// into the client or block runs under the mutex: work decided under the lock (sends, closes,
// user callbacks, log lines) is collected in an Actions and run after unlocking.
//
// Lifetime: Client owns the Core through a shared_ptr; socket handlers and send callbacks hold
// weak_ptrs, so a late callback after ~Client finds nothing to do.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bx/rpc.h"
#include "rpc/frame.h"
#include "rpc/retry.h"

namespace bx::rpc {

struct CallState;

// Requests from this size on extend the silence a connection is allowed (large_bytes_sent).
inline constexpr size_t kLargeFrameBytes = size_t{1} << 20;

// One transport socket to one replica, and its health.
struct Connection {
  enum class State { kConnecting, kHandshaking, kReady, kClosed };
  uint64_t serial = 0;
  size_t replica = 0;
  std::string scheme;
  State state = State::kConnecting;
  std::shared_ptr<Socket> socket;
  std::unordered_map<std::string, uint32_t> methods;     // from the server's HelloAck
  std::unordered_map<uint64_t, CallState*> outstanding;  // by wire call id
  Clock::time_point opened;
  Clock::time_point last_receive;
  Clock::time_point last_heartbeat;
  // Bytes of large requests (kLargeFrameBytes and up) sent so far, and how many of them the
  // peer is known to have taken in: a heartbeat carries the count sent before it (in its call
  // id, which the server echoes), and the peer answers it only after reading those bytes. The
  // difference still has to travel before anything sent after it can be answered
  // (SilenceAllowedLocked).
  uint64_t large_bytes_sent = 0;
  uint64_t large_bytes_taken = 0;
  int consecutive_timeouts = 0;  // calls that timed out with no response in between
};

struct Replica {
  ReplicaAddress address;
  ReplicaState state = ReplicaState::kConnecting;
  std::shared_ptr<Connection> active;     // takes new calls once kReady
  std::shared_ptr<Connection> candidate;  // an RDMA connection tried while on TCP fallback
  std::vector<std::shared_ptr<Connection>> draining;  // old connections finishing their calls
  bool connecting = false;  // a connect task for `active` is queued or running
  bool candidate_connecting = false;
  bool on_tcp_fallback = false;
  Status rdma_error;  // why RDMA was last found unusable
  // Why it last went down or failed to connect (a refused secret, a refused connection, silence),
  // so a call that finds no replica says why instead of only that.
  std::string down_reason;
  // Its last connect was refused by the peer (its secret, its version, a connection limit): a
  // call that finds it down fails at once rather than waiting for the next probe.
  bool refused = false;
  Clock::time_point next_probe;
  Clock::time_point next_rdma_try;
  int outstanding = 0;
  uint64_t calls = 0;
  bool Ready() const { return active && active->state == Connection::State::kReady; }
  // Down with no connection being made: it is reconnected when next_probe comes.
  bool AwaitingProbe() const { return state == ReplicaState::kDown && !active && !connecting; }
};

struct CallState {
  enum class Phase { kWaiting, kInFlight, kBackoff };
  uint64_t id = 0;
  std::string method;
  CallOptions options;
  int max_attempts = 1;
  Clock::time_point start;
  Clock::time_point deadline;
  Message request;  // empty once moved into a send (a call that cannot be retried)
  Callback done;
  Phase phase = Phase::kWaiting;
  int attempts = 0;
  uint64_t wire_id = 0;
  std::shared_ptr<Connection> connection;  // of the attempt in flight
  Clock::time_point retry_at;
  Status last_error;
};

struct ConnectTask {
  size_t replica = 0;
  std::vector<std::string> schemes;  // tried in order: {"rdma", "tcp"}, {"tcp"} or {"rdma"}
  bool candidate = false;            // an RDMA retry while the replica is on TCP
};

struct TimerEvent {
  Clock::time_point at;
  uint64_t call_id;
  bool retry;  // false: the call's deadline
  bool operator>(const TimerEvent& other) const { return at > other.at; }
};

// What to do once the mutex is released.
struct Actions {
  struct PendingSend {
    std::shared_ptr<Socket> socket;
    std::weak_ptr<Connection> connection;
    uint64_t wire_id = 0;
    Buffer frame;
  };
  std::vector<PendingSend> sends;
  std::vector<std::shared_ptr<Socket>> closes;
  std::vector<std::pair<Callback, Result<Message>>> completions;
  std::vector<std::string> logs;
  bool empty() const {
    return sends.empty() && closes.empty() && completions.empty() && logs.empty();
  }
};

struct BX_HIDDEN Client::Core : std::enable_shared_from_this<Client::Core> {
  explicit Core(ClientOptions opts)
      : options(std::move(opts)),
        budget(options.retry.budget_ratio, options.retry.budget_max_tokens) {}

  // --- set-up and teardown (client.cc) ---
  Status Init(std::vector<ReplicaAddress> addresses);
  void Shutdown();

  // --- calls (client.cc); "Locked" functions need the mutex ---
  void StartCall(std::string method, Message request, const CallOptions& call_options,
                 Callback done);
  void DispatchLocked(CallState* call, Clock::time_point now, Actions& actions);
  // The retry, if any, goes no sooner than `not_before` (max: no such bound).
  void AttemptFailedLocked(CallState* call, const Status& status, bool never_left,
                           Clock::time_point now, Actions& actions,
                           Clock::time_point not_before = Clock::time_point::max());
  void FinishLocked(CallState* call, Result<Message> result, Actions& actions);
  void RedispatchWaitingLocked(Clock::time_point now, Actions& actions);
  void OnSendFailed(const std::weak_ptr<Connection>& connection, uint64_t wire_id,
                    const Status& status);
  int PickReplicaLocked();
  // " (address: why it is down; ...)" for every replica not ready, or "" when none is known.
  std::string WhyUnreachableLocked() const;
  void PushTimerLocked(TimerEvent event);
  void RunActions(Actions& actions);
  void Log(Actions& actions, std::string line) { actions.logs.push_back(std::move(line)); }

  // --- connections and health (client_connections.cc) ---
  void QueueConnectLocked(size_t replica, std::vector<std::string> schemes, bool candidate);
  void ConnectorLoop();
  void RunConnectTask(const ConnectTask& task);
  void OnMessage(const std::shared_ptr<Connection>& connection, Buffer frame);
  void OnClose(const std::shared_ptr<Connection>& connection, const Status& status);
  // Ends a connection and every attempt on it. `peer_silent`: the peer stopped answering
  // (heartbeats, call timeouts), which says the host is unreachable, not only its RDMA path: the
  // replica goes down rather than falling back to TCP.
  void FailConnectionLocked(const std::shared_ptr<Connection>& connection, const Status& why,
                            Clock::time_point now, Actions& actions, bool peer_silent = false);
  void OnHelloAckLocked(const std::shared_ptr<Connection>& connection, std::string_view table,
                        Clock::time_point now, Actions& actions);
  void SetReplicaStateLocked(Replica& replica, ReplicaState state, const std::string& why,
                             Actions& actions);
  // Probes, RDMA retries, set-up deadlines, heartbeats and silence checks that are due; returns
  // when the next one is (at most a heartbeat interval on).
  Clock::time_point MaintainLocked(Clock::time_point now, Actions& actions);
  // Something maintenance watches changed (a connection opened, became ready or failed, a probe
  // was scheduled): a sleeping timer thread wakes to plan again.
  void MaintenanceChangedLocked();
  // How long `connection` may receive nothing before it is declared dead: heartbeat_timeout,
  // plus the time its large messages in motion take at slowest_transfer_bytes_per_second.
  Clock::duration SilenceAllowedLocked(const Connection& connection) const;
  // `call_id`: a heartbeat's, the large bytes sent before it (Connection::large_bytes_sent).
  void SendControlLocked(Connection& connection, FrameKind kind, Actions& actions,
                         uint64_t call_id = 0);
  void TimerLoop();
  // Whether a timer event still has work: its call is under way (and, for a retry, still
  // waiting for this retry).
  bool TimerStillDueLocked(const TimerEvent& event) const;

  ClientOptions options;
  std::unique_ptr<Transport> owned_rdma;
  std::unique_ptr<Transport> owned_tcp;
  Transport* rdma = nullptr;
  Transport* tcp = nullptr;

  mutable std::mutex mutex;
  std::condition_variable timer_changed;
  std::condition_variable connect_queue_changed;
  std::condition_variable ready_changed;
  bool stopping = false;
  std::vector<Replica> replicas;
  std::unordered_map<uint64_t, std::unique_ptr<CallState>> calls;
  std::deque<uint64_t> waiting;  // calls parked until a replica is ready
  std::priority_queue<TimerEvent, std::vector<TimerEvent>, std::greater<TimerEvent>> timers;
  Clock::time_point timer_wakes_at = Clock::time_point::max();
  std::deque<ConnectTask> connect_queue;
  uint64_t next_call_id = 1;
  uint64_t next_wire_id = 1;
  uint64_t next_serial = 1;
  size_t rotation = 0;
  std::mt19937_64 rng;
  RetryBudget budget;
  ClientStats stats;  // `replicas` filled in by stats()
  std::thread timer_thread;
  std::thread connector_thread;
};

}  // namespace bx::rpc
