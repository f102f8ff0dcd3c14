// rpc::Client: the life of a call. A call is dispatched to a ready replica chosen by the policy,
// or parked until one is ready; an attempt that fails is retried when the call is idempotent or
// its request provably never left, the retry budget allows it and the backoff fits before the
// deadline. Every call ends by its deadline: the timer thread holds a deadline event for each.
#include <algorithm>
#include <cstring>

#include "bx/log.h"
#include "rpc/client_core.h"
#include "rpc/frame.h"
#include "transport/transport_registry.h"

namespace bx::rpc {

Status Client::Core::Init(std::vector<ReplicaAddress> addresses) {
  if (addresses.empty()) return InvalidArgument("rpc client: no replicas");
  rng.seed(options.seed != 0 ? options.seed : std::random_device{}());
  bool wants_rdma = false;
  bool wants_tcp = false;
  for (const ReplicaAddress& address : addresses) {
    if (address.rdma_url.empty() && address.tcp_url.empty()) {
      return InvalidArgument("rpc client: a replica address names no url");
    }
    wants_rdma |= !address.rdma_url.empty();
    wants_tcp |= !address.tcp_url.empty();
  }
  rdma = options.rdma_transport;
  tcp = options.tcp_transport;
  if (wants_rdma && rdma == nullptr) {
    auto created = transport::CreateTransport("rdma", options.transport);
    if (created.ok()) {
      owned_rdma = std::move(created).value();
      rdma = owned_rdma.get();
    } else if (!wants_tcp) {
      return created.status().WithContext("rpc client");
    } else {
      // Every replica has a tcp url too: run on TCP alone, and say so once.
      std::string line = "rdma unavailable, using tcp only: " + created.status().ToString();
      if (options.log) {
        options.log(line);
      } else {
        bx::Log(LogLevel::kWarning, "bx rpc: " + line);
      }
    }
  }
  if (wants_tcp && tcp == nullptr) {
    auto created = transport::CreateTransport("tcp", options.transport);
    if (!created.ok()) return created.status().WithContext("rpc client");
    owned_tcp = std::move(created).value();
    tcp = owned_tcp.get();
  }
  {
    std::lock_guard lock(mutex);
    for (ReplicaAddress& address : addresses) {
      replicas.emplace_back();
      replicas.back().address = std::move(address);
    }
    for (size_t i = 0; i < replicas.size(); ++i) QueueConnectLocked(i, {"rdma", "tcp"}, false);
  }
  timer_thread = std::thread([this] { TimerLoop(); });
  connector_thread = std::thread([this] { ConnectorLoop(); });
  return Status::Ok();
}

void Client::Core::Shutdown() {
  Actions actions;
  {
    std::lock_guard lock(mutex);
    if (stopping) return;
    stopping = true;
    for (auto& [id, call] : calls) {
      if (call->done) {
        actions.completions.emplace_back(std::move(call->done),
                                         Aborted("rpc client destroyed before the call ended"));
      }
    }
    calls.clear();
    waiting.clear();
    for (Replica& replica : replicas) {
      for (auto* connection : {&replica.active, &replica.candidate}) {
        if (*connection && (*connection)->socket) actions.closes.push_back((*connection)->socket);
        if (*connection) {
          (*connection)->state = Connection::State::kClosed;
          (*connection)->outstanding.clear();
        }
      }
      for (auto& connection : replica.draining) {
        if (connection->socket) actions.closes.push_back(connection->socket);
        connection->state = Connection::State::kClosed;
        connection->outstanding.clear();
      }
    }
  }
  timer_changed.notify_all();
  connect_queue_changed.notify_all();
  ready_changed.notify_all();
  if (timer_thread.joinable()) timer_thread.join();
  if (connector_thread.joinable()) connector_thread.join();
  RunActions(actions);
  // Joins the transports' I/O threads: no handler of ours runs after this.
  owned_rdma.reset();
  owned_tcp.reset();
  std::lock_guard lock(mutex);
  for (Replica& replica : replicas) {
    // Drop the sockets: their handlers hold our connections, which hold them.
    if (replica.active) replica.active->socket.reset();
    if (replica.candidate) replica.candidate->socket.reset();
    for (auto& connection : replica.draining) connection->socket.reset();
  }
}

void Client::Core::RunActions(Actions& actions) {
  for (Actions::PendingSend& send : actions.sends) {
    std::weak_ptr<Core> weak = weak_from_this();
    send.socket->Send(std::move(send.frame), [weak, connection = send.connection,
                                              wire = send.wire_id](const Status& status) {
      if (status.ok()) return;
      if (auto core = weak.lock()) core->OnSendFailed(connection, wire, status);
    });
  }
  for (auto& socket : actions.closes) socket->Close();
  for (const std::string& line : actions.logs) {
    if (options.log) {
      options.log(line);
    } else {
      bx::Log(LogLevel::kInfo, "bx rpc: " + line);
    }
  }
  for (auto& [done, result] : actions.completions) done(std::move(result));
  actions = Actions();
}

void Client::Core::PushTimerLocked(TimerEvent event) {
  timers.push(event);
  if (event.at < timer_wakes_at) {
    timer_wakes_at = event.at;
    timer_changed.notify_one();
  }
}

void Client::Core::MaintenanceChangedLocked() {
  if (timer_wakes_at == Clock::time_point::min()) return;  // awake: it plans after this
  timer_wakes_at = Clock::time_point::min();
  timer_changed.notify_one();
}

void Client::Core::StartCall(std::string method, Message request, const CallOptions& call_options,
                             Callback done) {
  const Clock::time_point now = Clock::now();
  Actions actions;
  {
    std::lock_guard lock(mutex);
    ++stats.calls;
    if (stopping) {
      actions.completions.emplace_back(std::move(done), Aborted("rpc client is shutting down"));
    } else if (!request) {
      actions.completions.emplace_back(std::move(done),
                                       InvalidArgument("rpc call " + method + ": empty request"));
    } else {
      budget.OnCall();
      auto owned = std::make_unique<CallState>();
      CallState* call = owned.get();
      call->id = next_call_id++;
      call->method = std::move(method);
      call->options = call_options;
      call->max_attempts = std::max(1, call_options.max_attempts > 0 ? call_options.max_attempts
                                                                     : options.retry.max_attempts);
      call->start = now;
      call->deadline = now + call_options.timeout;
      call->request = std::move(request);
      call->done = std::move(done);
      calls.emplace(call->id, std::move(owned));
      PushTimerLocked({call->deadline, call->id, false});
      DispatchLocked(call, now, actions);
    }
  }
  RunActions(actions);
}

int Client::Core::PickReplicaLocked() {
  // Small sets (a handful of replicas): a scan is cheaper than keeping an index.
  int ready[64];
  int count = 0;
  for (size_t i = 0; i < replicas.size() && count < 64; ++i) {
    if (replicas[i].Ready()) ready[count++] = static_cast<int>(i);
  }
  if (count == 0) return -1;
  if (count == 1) return ready[0];
  switch (options.policy) {
    case ReplicaPolicy::kRoundRobin:
      return ready[rotation++ % count];
    case ReplicaPolicy::kLeastOutstanding: {
      // Start the scan at a rotating offset so that ties spread over the replicas.
      size_t offset = rotation++;
      int best = ready[offset % count];
      for (int i = 1; i < count; ++i) {
        int candidate = ready[(offset + i) % count];
        if (replicas[candidate].outstanding < replicas[best].outstanding) best = candidate;
      }
      return best;
    }
    case ReplicaPolicy::kPowerOfTwoChoices: {
      std::uniform_int_distribution<int> pick(0, count - 1);
      int a = pick(rng);
      int b = pick(rng);
      if (b == a) b = (a + 1) % count;
      return replicas[ready[a]].outstanding <= replicas[ready[b]].outstanding ? ready[a] : ready[b];
    }
  }
  return ready[0];
}

std::string Client::Core::WhyUnreachableLocked() const {
  std::string why;
  for (const Replica& replica : replicas) {
    if (replica.Ready() || replica.down_reason.empty()) continue;
    why += (why.empty() ? " (" : "; ") + replica.address.ToString() + ": " + replica.down_reason;
  }
  return why.empty() ? why : why + ")";
}

void Client::Core::DispatchLocked(CallState* call, Clock::time_point now, Actions& actions) {
  if (now >= call->deadline) {
    FinishLocked(
        call,
        Status(StatusCode::kDeadlineExceeded,
               "rpc " + call->method + ": deadline passed before it was sent" +
                   (call->last_error.ok() ? ""
                                          : " (last error: " + call->last_error.ToString() + ")")),
        actions);
    return;
  }
  int index = PickReplicaLocked();
  if (index < 0) {
    // A down replica whose probe is due is reconnected now, for this call, rather than on the
    // timer thread's next turn; the call waits for the outcome.
    bool any_connecting = false;
    Clock::time_point next_probe = Clock::time_point::max();
    for (size_t i = 0; i < replicas.size(); ++i) {
      Replica& replica = replicas[i];
      if (replica.AwaitingProbe()) {
        if (now >= replica.next_probe) {
          QueueConnectLocked(i, {"rdma", "tcp"}, false);
        } else if (!replica.refused) {
          next_probe = std::min(next_probe, replica.next_probe);
        }
      }
      any_connecting |= replica.connecting ||
                        (replica.active && replica.active->state != Connection::State::kReady);
    }
    if (any_connecting) {
      call->phase = CallState::Phase::kWaiting;
      waiting.push_back(call->id);
      return;
    }
    ++call->attempts;  // an attempt that found no connection still counts towards max_attempts
    // Its retry waits for the next probe of a replica not refused: retried sooner it would find
    // the same down replicas (a client evicted once by a connection flood ran out of attempts
    // in 6 ms so).
    AttemptFailedLocked(
        call,
        Unavailable("rpc " + call->method + ": no replica is reachable" + WhyUnreachableLocked()),
        /*never_left=*/true, now, actions, next_probe);
    return;
  }
  Replica& replica = replicas[index];
  Connection& connection = *replica.active;
  auto method = connection.methods.find(call->method);
  if (method == connection.methods.end()) {
    FinishLocked(
        call,
        NotFound("rpc method " + call->method + " is not served by " + replica.address.ToString()),
        actions);
    return;
  }
  // A call that may be sent again keeps its request: the transport frees what it sends.
  const bool may_resend = call->options.idempotent && call->attempts + 1 < call->max_attempts;
  Buffer frame;
  if (may_resend) {
    Result<Buffer> copy = Buffer::Allocate(MessageFrame::Of(call->request).size());
    if (!copy.ok()) {
      FinishLocked(call, copy.status(), actions);
      return;
    }
    std::memcpy(copy->data() + kFrameHeaderBytes, call->request.data(), call->request.size());
    frame = std::move(copy).value();
  } else {
    frame = MessageFrame::Take(call->request);
  }
  FrameHeader header;
  header.kind = FrameKind::kRequest;
  header.flags = call->options.idempotent ? kFlagIdempotent : 0;
  header.call_id = next_wire_id++;
  header.method_id = method->second;
  header.budget_us = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::microseconds>(call->deadline - now).count());
  EncodeHeader(header, frame);

  call->phase = CallState::Phase::kInFlight;
  call->wire_id = header.call_id;
  call->connection = replica.active;
  ++call->attempts;
  ++replica.outstanding;
  ++replica.calls;
  ++stats.attempts;
  connection.outstanding.emplace(header.call_id, call);
  if (frame.size() >= kLargeFrameBytes) connection.large_bytes_sent += frame.size();
  actions.sends.push_back({connection.socket, replica.active, header.call_id, std::move(frame)});
}

void Client::Core::AttemptFailedLocked(CallState* call, const Status& status, bool never_left,
                                       Clock::time_point now, Actions& actions,
                                       Clock::time_point not_before) {
  call->last_error = status;
  call->connection.reset();
  if (!never_left && !call->options.idempotent) {
    // The request may have run on the server: a second run could apply it twice.
    FinishLocked(call, status, actions);
    return;
  }
  // Without its request (moved into the transport, which frees it) a call cannot be resent.
  if (!call->request || call->attempts >= call->max_attempts) {
    FinishLocked(call, status, actions);
    return;
  }
  if (!budget.TryWithdraw()) {
    ++stats.retries_throttled;
    FinishLocked(call, status.WithContext("retry budget exhausted"), actions);
    return;
  }
  Clock::time_point retry_at = now + Backoff(options.retry, call->attempts, rng);
  if (not_before != Clock::time_point::max()) retry_at = std::max(retry_at, not_before);
  if (retry_at >= call->deadline) {
    FinishLocked(call, status, actions);
    return;
  }
  ++stats.retries;
  call->phase = CallState::Phase::kBackoff;
  call->retry_at = retry_at;
  PushTimerLocked({call->retry_at, call->id, true});
}

void Client::Core::FinishLocked(CallState* call, Result<Message> result, Actions& actions) {
  if (result.ok()) {
    ++stats.ok;
    stats.latency[call->method].Record(Clock::now() - call->start);
  } else {
    ++stats.errors[result.status().code()];
  }
  if (call->connection) {
    // Still in flight (a deadline): forget the attempt; a late response is ignored.
    Connection& connection = *call->connection;
    if (connection.outstanding.erase(call->wire_id) > 0) {
      --replicas[connection.replica].outstanding;
    }
  }
  if (call->done) actions.completions.emplace_back(std::move(call->done), std::move(result));
  calls.erase(call->id);  // destroys *call
}

void Client::Core::RedispatchWaitingLocked(Clock::time_point now, Actions& actions) {
  std::deque<uint64_t> parked;
  parked.swap(waiting);
  for (uint64_t id : parked) {
    auto it = calls.find(id);
    if (it == calls.end() || it->second->phase != CallState::Phase::kWaiting) continue;
    DispatchLocked(it->second.get(), now, actions);
  }
}

void Client::Core::OnSendFailed(const std::weak_ptr<Connection>& weak_connection, uint64_t wire_id,
                                const Status& status) {
  std::shared_ptr<Connection> connection = weak_connection.lock();
  if (!connection) return;
  Actions actions;
  {
    std::lock_guard lock(mutex);
    if (stopping) return;
    auto it = connection->outstanding.find(wire_id);
    if (it == connection->outstanding.end()) return;  // already failed with its connection
    CallState* call = it->second;
    connection->outstanding.erase(it);
    --replicas[connection->replica].outstanding;
    // Back-pressure refuses a message before it is queued: it provably never left.
    const bool never_left = status.code() == StatusCode::kResourceExhausted;
    AttemptFailedLocked(call, status.WithContext("rpc send"), never_left, Clock::now(), actions);
  }
  RunActions(actions);
}

// --- Client ---

Result<std::unique_ptr<Client>> Client::Create(std::vector<ReplicaAddress> replicas,
                                               ClientOptions options) {
  auto core = std::make_shared<Core>(std::move(options));
  BX_RETURN_IF_ERROR(core->Init(std::move(replicas)));
  return std::unique_ptr<Client>(new Client(std::move(core)));
}

Client::~Client() {
  core_->Shutdown();
}

void Client::Call(std::string_view method, Message request, const CallOptions& options,
                  Callback done) {
  core_->StartCall(std::string(method), std::move(request), options, std::move(done));
}

std::future<Result<Message>> Client::Call(std::string_view method, Message request,
                                          const CallOptions& options) {
  auto promise = std::make_shared<std::promise<Result<Message>>>();
  std::future<Result<Message>> future = promise->get_future();
  Call(method, std::move(request), options,
       [promise](Result<Message> result) { promise->set_value(std::move(result)); });
  return future;
}

Status Client::WaitReady(std::chrono::milliseconds timeout) {
  std::unique_lock lock(core_->mutex);
  bool ready = core_->ready_changed.wait_for(lock, timeout, [&] {
    for (const Replica& replica : core_->replicas) {
      if (replica.Ready()) return true;
    }
    return core_->stopping;
  });
  if (!ready)
    return Unavailable("rpc client: no replica ready after " + std::to_string(timeout.count()) +
                       " ms" + core_->WhyUnreachableLocked());
  return Status::Ok();
}

ClientStats Client::stats() const {
  std::lock_guard lock(core_->mutex);
  ClientStats out = core_->stats;
  for (const Replica& replica : core_->replicas) {
    ReplicaInfo info;
    info.address = replica.address;
    info.state = replica.state;
    info.transport = replica.Ready() ? replica.active->scheme : "";
    info.on_tcp_fallback = replica.on_tcp_fallback;
    info.outstanding = replica.outstanding;
    info.calls = replica.calls;
    out.replicas.push_back(std::move(info));
  }
  return out;
}

}  // namespace bx::rpc
