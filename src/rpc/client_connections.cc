// rpc::Client connections: set-up (transport connect, then the method-table exchange), health
// (heartbeats on idle connections, the socket's own close, call timeouts), replica state, and the
// RDMA-to-TCP fallback with periodic attempts to move back.
//
// Fallback rules. A replica with an rdma url is first connected over RDMA. When that connection
// cannot be set up or fails later, the replica moves to TCP ("fallback", counted and logged once
// per move) and keeps serving; every rdma_retry_interval a candidate RDMA connection is tried in
// the background, and when it is ready new calls go to it and the TCP connection drains ("return",
// counted and logged). A replica whose TCP connection fails, or that no transport reaches, is down;
// it is probed every probe_interval (RDMA first) and comes back up when a connection is ready.
#include <pthread.h>

#include "base/transfer_time.h"
#include "rpc/client_core.h"
#include "rpc/frame.h"

namespace bx::rpc {

namespace {

std::string Ms(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + " ms";
}

}  // namespace

void Client::Core::QueueConnectLocked(size_t replica, std::vector<std::string> schemes,
                                      bool candidate) {
  (candidate ? replicas[replica].candidate_connecting : replicas[replica].connecting) = true;
  connect_queue.push_back({replica, std::move(schemes), candidate});
  connect_queue_changed.notify_one();
}

void Client::Core::ConnectorLoop() {
  pthread_setname_np(pthread_self(), "bx-rpc-connect");
  std::unique_lock lock(mutex);
  for (;;) {
    connect_queue_changed.wait(lock, [&] { return stopping || !connect_queue.empty(); });
    if (stopping) return;
    ConnectTask task = std::move(connect_queue.front());
    connect_queue.pop_front();
    lock.unlock();
    RunConnectTask(task);
    lock.lock();
  }
}

void Client::Core::RunConnectTask(const ConnectTask& task) {
  Status last_error;
  for (const std::string& scheme : task.schemes) {
    ReplicaAddress address;
    {
      std::lock_guard lock(mutex);
      if (stopping) return;
      address = replicas[task.replica].address;
    }
    const std::string& url = scheme == "rdma" ? address.rdma_url : address.tcp_url;
    Transport* transport = scheme == "rdma" ? rdma : tcp;
    if (url.empty() || transport == nullptr) continue;

    auto connection = std::make_shared<Connection>();
    connection->replica = task.replica;
    connection->scheme = scheme;
    std::weak_ptr<Core> weak_core = weak_from_this();
    std::weak_ptr<Connection> weak_connection = connection;
    SocketHandlers handlers{[weak_core, weak_connection](Socket&, Buffer frame) {
                              auto core = weak_core.lock();
                              auto connection = weak_connection.lock();
                              if (core && connection) core->OnMessage(connection, std::move(frame));
                            },
                            [weak_core, weak_connection](Socket&, const Status& status) {
                              auto core = weak_core.lock();
                              auto connection = weak_connection.lock();
                              if (core && connection) core->OnClose(connection, status);
                            }};
    Result<std::shared_ptr<Socket>> socket =
        transport->Connect(url, std::move(handlers), options.connect_timeout);

    Actions actions;
    bool connected = false;
    {
      std::lock_guard lock(mutex);
      if (stopping) {
        if (socket.ok()) actions.closes.push_back(*socket);
      } else if (!socket.ok() || connection->state == Connection::State::kClosed) {
        last_error = socket.ok() ? Unavailable("closed during set-up") : socket.status();
        if (scheme == "rdma") replicas[task.replica].rdma_error = last_error;
        if (socket.ok()) actions.closes.push_back(*socket);
      } else {
        const Clock::time_point now = Clock::now();
        Replica& replica = replicas[task.replica];
        connection->serial = next_serial++;
        connection->socket = *socket;
        connection->state = Connection::State::kHandshaking;
        connection->opened = connection->last_receive = connection->last_heartbeat = now;
        ++stats.connections_opened;
        if (task.candidate) {
          replica.candidate = connection;
          replica.candidate_connecting = false;
        } else {
          replica.active = connection;
          replica.connecting = false;
          if (scheme == "rdma") replica.rdma_error = Status::Ok();
        }
        SendControlLocked(*connection, FrameKind::kHello, actions);
        MaintenanceChangedLocked();  // its set-up deadline
        connected = true;
      }
    }
    RunActions(actions);
    if (connected) return;
  }
  // No transport reached the replica.
  Actions actions;
  {
    std::lock_guard lock(mutex);
    if (stopping) return;
    const Clock::time_point now = Clock::now();
    Replica& replica = replicas[task.replica];
    if (task.candidate) {
      replica.candidate_connecting = false;
      replica.next_rdma_try = now + options.rdma_retry_interval;
      MaintenanceChangedLocked();
      return;
    }
    replica.connecting = false;
    replica.next_probe = now + options.probe_interval;
    MaintenanceChangedLocked();
    // The transports say a peer's refusal with FailedPrecondition (or PermissionDenied).
    replica.refused = last_error.code() == StatusCode::kFailedPrecondition ||
                      last_error.code() == StatusCode::kPermissionDenied;
    SetReplicaStateLocked(replica, ReplicaState::kDown,
                          last_error.ok() ? "no transport to connect with" : last_error.ToString(),
                          actions);
    RedispatchWaitingLocked(now, actions);
  }
  RunActions(actions);
}

void Client::Core::SendControlLocked(Connection& connection, FrameKind kind, Actions& actions,
                                     uint64_t call_id) {
  FrameHeader header;
  header.kind = kind;
  header.call_id = call_id;
  Result<Buffer> frame = MakeFrame(header, {});
  if (!frame.ok() || !connection.socket) return;
  // No wire id: a control frame failing to send shows up as the connection's failure.
  actions.sends.push_back({connection.socket, {}, 0, std::move(frame).value()});
}

void Client::Core::SetReplicaStateLocked(Replica& replica, ReplicaState state,
                                         const std::string& why, Actions& actions) {
  if (state == ReplicaState::kDown && !why.empty()) replica.down_reason = why;
  if (replica.state == state) return;
  if (replica.state != ReplicaState::kConnecting || state == ReplicaState::kDown) {
    ++stats.replica_state_changes;
  }
  Log(actions, "replica " + replica.address.ToString() + ": " +
                   std::string(ReplicaStateName(replica.state)) + " -> " +
                   std::string(ReplicaStateName(state)) + (why.empty() ? "" : " (" + why + ")"));
  replica.state = state;
}

void Client::Core::OnMessage(const std::shared_ptr<Connection>& connection, Buffer frame) {
  Result<FrameHeader> header = DecodeHeader(frame);
  Actions actions;
  {
    std::lock_guard lock(mutex);
    if (stopping || connection->state == Connection::State::kClosed) return;
    const Clock::time_point now = Clock::now();
    if (!header.ok()) {
      FailConnectionLocked(connection, header.status(), now, actions);
    } else {
      connection->last_receive = now;
      switch (header->kind) {
        case FrameKind::kHelloAck: {
          std::string_view table(reinterpret_cast<const char*>(frame.data()) + kFrameHeaderBytes,
                                 frame.size() - kFrameHeaderBytes);
          OnHelloAckLocked(connection, table, now, actions);
          break;
        }
        case FrameKind::kResponse: {
          auto it = connection->outstanding.find(header->call_id);
          if (it == connection->outstanding.end()) break;  // a call that already ended
          CallState* call = it->second;
          connection->outstanding.erase(it);
          connection->consecutive_timeouts = 0;
          --replicas[connection->replica].outstanding;
          call->connection.reset();
          auto code = static_cast<StatusCode>(header->status);
          Message response = MessageFrame::Wrap(std::move(frame));
          if (code == StatusCode::kOk) {
            FinishLocked(call, std::move(response), actions);
          } else {
            FinishLocked(call, Status(code, std::string(response.view())), actions);
          }
          break;
        }
        case FrameKind::kHeartbeatAck:
          connection->large_bytes_taken = std::clamp(header->call_id, connection->large_bytes_taken,
                                                     connection->large_bytes_sent);
          break;
        default:
          break;
      }
    }
  }
  RunActions(actions);
}

void Client::Core::OnHelloAckLocked(const std::shared_ptr<Connection>& connection,
                                    std::string_view table, Clock::time_point now,
                                    Actions& actions) {
  if (connection->state != Connection::State::kHandshaking) return;
  auto methods = DecodeMethodTable(table);
  if (!methods.ok()) {
    FailConnectionLocked(connection, methods.status(), now, actions);
    return;
  }
  connection->methods = std::move(methods).value();
  connection->state = Connection::State::kReady;
  MaintenanceChangedLocked();  // its heartbeats, and an RDMA retry after a fall-back
  Replica& replica = replicas[connection->replica];
  if (replica.candidate == connection) {
    // RDMA works again: new calls go to it; the TCP connection finishes what it carries.
    if (replica.active) {
      replica.draining.push_back(std::move(replica.active));
    }
    replica.active = std::move(replica.candidate);
    if (replica.on_tcp_fallback) {
      replica.on_tcp_fallback = false;
      ++stats.returns_to_rdma;
      Log(actions, "replica " + replica.address.ToString() + ": rdma works again; moving back");
    }
  }
  if (replica.active == connection) {
    if (connection->scheme == "tcp" && !replica.on_tcp_fallback && rdma != nullptr &&
        !replica.address.rdma_url.empty()) {
      // The move is counted when it is complete: TCP carries calls now.
      replica.on_tcp_fallback = true;
      replica.next_rdma_try = now + options.rdma_retry_interval;
      ++stats.fallbacks_to_tcp;
      Log(actions, "replica " + replica.address.ToString() + ": rdma unusable (" +
                       replica.rdma_error.ToString() + "); falling back to tcp");
    }
    if (connection->scheme == "rdma" && replica.on_tcp_fallback) {
      // A probe of a down replica reconnected over RDMA.
      replica.on_tcp_fallback = false;
      ++stats.returns_to_rdma;
      Log(actions, "replica " + replica.address.ToString() + ": rdma works again; moving back");
    }
    SetReplicaStateLocked(replica, ReplicaState::kUp, "connected over " + connection->scheme,
                          actions);
    ready_changed.notify_all();
    RedispatchWaitingLocked(now, actions);
  }
}

void Client::Core::OnClose(const std::shared_ptr<Connection>& connection, const Status& status) {
  Actions actions;
  {
    std::lock_guard lock(mutex);
    if (stopping || connection->state == Connection::State::kClosed) return;
    FailConnectionLocked(connection,
                         status.ok() ? Unavailable("the peer closed the connection") : status,
                         Clock::now(), actions);
  }
  RunActions(actions);
}

void Client::Core::FailConnectionLocked(const std::shared_ptr<Connection>& connection,
                                        const Status& why, Clock::time_point now, Actions& actions,
                                        bool peer_silent) {
  if (connection->state == Connection::State::kClosed) return;
  const bool was_ready = connection->state == Connection::State::kReady;
  connection->state = Connection::State::kClosed;
  ++stats.connections_failed;
  Replica& replica = replicas[connection->replica];
  const std::string peer = connection->scheme + " connection to " + replica.address.ToString();
  if (replica.candidate == connection) {
    replica.candidate.reset();
    replica.next_rdma_try = now + options.rdma_retry_interval;
  } else if (replica.active == connection) {
    replica.active.reset();
    if (connection->scheme == "rdma" && !peer_silent && !replica.address.tcp_url.empty() &&
        tcp != nullptr) {
      // An RDMA failure, not the host's: keep serving over TCP to the same replica.
      replica.rdma_error =
          why.WithContext(was_ready ? "rdma connection failed" : "rdma connection set-up failed");
      replica.next_rdma_try = now + options.rdma_retry_interval;
      QueueConnectLocked(connection->replica, {"tcp"}, false);
    } else {
      replica.next_probe = now + options.probe_interval;
      replica.refused = false;
      SetReplicaStateLocked(replica, ReplicaState::kDown, peer + ": " + why.ToString(), actions);
    }
  } else {
    std::erase(replica.draining, connection);
  }
  // Every call on the connection ends its attempt; retry rules decide what happens next.
  std::unordered_map<uint64_t, CallState*> outstanding;
  outstanding.swap(connection->outstanding);
  for (auto& [wire, call] : outstanding) {
    --replica.outstanding;
    AttemptFailedLocked(call, Unavailable(peer + " lost: " + why.ToString()),
                        /*never_left=*/false, now, actions);
  }
  if (connection->socket) actions.closes.push_back(std::move(connection->socket));
  MaintenanceChangedLocked();  // a probe or an RDMA retry to plan
  RedispatchWaitingLocked(now, actions);
}

Clock::duration Client::Core::SilenceAllowedLocked(const Connection& connection) const {
  uint64_t moving = connection.large_bytes_sent - connection.large_bytes_taken;
  for (const auto& [wire, call] : connection.outstanding) {
    moving += call->options.expected_response_bytes;
  }
  return options.heartbeat_timeout +
         TransferTime(moving, options.slowest_transfer_bytes_per_second);
}

Clock::time_point Client::Core::MaintainLocked(Clock::time_point now, Actions& actions) {
  // The earliest moment a check below can next come true; past it the timer looks again.
  Clock::time_point due = now + options.heartbeat_interval;
  const auto due_at = [&due, now](Clock::time_point at) { due = std::min(due, std::max(at, now)); };
  for (size_t i = 0; i < replicas.size(); ++i) {
    Replica& replica = replicas[i];
    if (replica.AwaitingProbe()) {
      if (now >= replica.next_probe) {
        QueueConnectLocked(i, {"rdma", "tcp"}, false);
      } else {
        due_at(replica.next_probe);
      }
    }
    if (replica.on_tcp_fallback && replica.Ready() && !replica.candidate &&
        !replica.candidate_connecting && rdma != nullptr && !replica.address.rdma_url.empty()) {
      if (now >= replica.next_rdma_try) {
        QueueConnectLocked(i, {"rdma"}, true);
      } else {
        due_at(replica.next_rdma_try);
      }
    }
    std::vector<std::shared_ptr<Connection>> connections = replica.draining;
    if (replica.active) connections.push_back(replica.active);
    if (replica.candidate) connections.push_back(replica.candidate);
    for (const std::shared_ptr<Connection>& connection : connections) {
      if (connection->state == Connection::State::kHandshaking) {
        if (now - connection->opened >= options.connect_timeout) {
          FailConnectionLocked(connection,
                               Status(StatusCode::kDeadlineExceeded,
                                      "no method table within " + Ms(options.connect_timeout)),
                               now, actions);
        } else {
          due_at(connection->opened + options.connect_timeout);
        }
        continue;
      }
      if (connection->state != Connection::State::kReady) continue;
      if (std::find(replica.draining.begin(), replica.draining.end(), connection) !=
              replica.draining.end() &&
          connection->outstanding.empty()) {
        connection->state = Connection::State::kClosed;
        std::erase(replica.draining, connection);
        if (connection->socket) actions.closes.push_back(std::move(connection->socket));
        continue;
      }
      const auto silent = now - connection->last_receive;
      const Clock::duration allowed = SilenceAllowedLocked(*connection);
      if (silent >= allowed) {
        FailConnectionLocked(
            connection,
            Unavailable("nothing received for " +
                        Ms(std::chrono::duration_cast<std::chrono::milliseconds>(silent))),
            now, actions, /*peer_silent=*/true);
      } else if (silent >= options.heartbeat_interval &&
                 now - connection->last_heartbeat >= options.heartbeat_interval) {
        connection->last_heartbeat = now;
        ++stats.heartbeats_sent;
        SendControlLocked(*connection, FrameKind::kHeartbeat, actions,
                          connection->large_bytes_sent);
      }
      if (connection->state == Connection::State::kReady) {
        due_at(connection->last_receive + allowed);
        due_at(std::max(connection->last_receive, connection->last_heartbeat) +
               options.heartbeat_interval);
      }
    }
  }
  return due;
}

bool Client::Core::TimerStillDueLocked(const TimerEvent& event) const {
  auto it = calls.find(event.call_id);
  if (it == calls.end()) return false;
  const CallState& call = *it->second;
  return !event.retry || (call.phase == CallState::Phase::kBackoff && call.retry_at == event.at);
}

void Client::Core::TimerLoop() {
  pthread_setname_np(pthread_self(), "bx-rpc-timer");
  std::unique_lock lock(mutex);
  // Each client's maintenance used to run every 10 ms whatever was due: a worker process with a
  // client per shard woke thousands of times a second doing nothing (a 16-shard x 2-replica
  // cluster with 16 workers on one 2-core host: 788 timer threads, 400 of them runnable at once,
  // etcd starved). Now the timer sleeps until the next check is due, at most a heartbeat
  // interval; a change that brings one forward wakes it (MaintenanceChangedLocked).
  Clock::time_point next_maintenance = Clock::now();
  while (!stopping) {
    const Clock::time_point now = Clock::now();
    Actions actions;
    while (!timers.empty() && timers.top().at <= now) {
      TimerEvent event = timers.top();
      timers.pop();
      if (!TimerStillDueLocked(event)) continue;  // the call ended, or this retry is stale
      CallState* call = calls.at(event.call_id).get();
      if (event.retry) {
        DispatchLocked(call, now, actions);
        continue;
      }
      // The deadline: the call ends now, whatever it is doing.
      if (call->phase == CallState::Phase::kInFlight && call->connection) {
        std::shared_ptr<Connection> connection = call->connection;
        FinishLocked(
            call,
            Status(StatusCode::kDeadlineExceeded,
                   "rpc " + call->method + ": no response from the " + connection->scheme +
                       " connection to " + replicas[connection->replica].address.ToString() +
                       " within the deadline"),
            actions);
        if (++connection->consecutive_timeouts >= options.max_consecutive_timeouts) {
          FailConnectionLocked(connection,
                               Unavailable(std::to_string(connection->consecutive_timeouts) +
                                           " calls in a row timed out"),
                               now, actions, /*peer_silent=*/true);
        }
      } else {
        if (call->phase == CallState::Phase::kWaiting) std::erase(waiting, call->id);
        FinishLocked(call,
                     Status(StatusCode::kDeadlineExceeded,
                            "rpc " + call->method + ": deadline passed" +
                                (call->last_error.ok()
                                     ? " while no replica was ready" + WhyUnreachableLocked()
                                     : " after " + call->last_error.ToString())),
                     actions);
      }
    }
    if (now >= next_maintenance) {
      next_maintenance = MaintainLocked(now, actions);
    }
    if (!actions.empty()) {
      lock.unlock();
      RunActions(actions);
      lock.lock();
      continue;
    }
    // Calls that ended leave their deadlines in the heap: drop those on top, so the thread does
    // not wake for each finished call's deadline (one wake-up per call, a second later).
    while (!timers.empty() && !TimerStillDueLocked(timers.top())) timers.pop();
    timer_wakes_at = next_maintenance;
    if (!timers.empty()) timer_wakes_at = std::min(timer_wakes_at, timers.top().at);
    timer_changed.wait_until(lock, timer_wakes_at);
    ++stats.timer_wakeups;
    timer_wakes_at = Clock::time_point::min();  // awake: pushes need not notify
  }
}

}  // namespace bx::rpc
