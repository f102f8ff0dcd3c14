// rpc::Server: listens on rdma:// and tcp://, answers Hello with its method table, and runs
// requests inline or on workers, dropping those whose caller has given up.
#include <pthread.h>

#include <algorithm>

#include "bx/log.h"
#include "rpc/frame.h"
#include "rpc/server_impl.h"
#include "transport/transport_registry.h"

namespace bx::rpc {

namespace {

// Remaining budget -> local deadline. A budget of 0 means the caller set none.
Clock::time_point DeadlineFromBudget(uint64_t budget_us, Clock::time_point arrived) {
  if (budget_us == 0) return Clock::time_point::max();
  return arrived + std::chrono::microseconds(budget_us);
}

}  // namespace

void Server::Impl::Log(std::string_view line) const {
  if (options.log) {
    options.log(line);
  } else {
    bx::Log(LogLevel::kInfo, "bx rpc server: " + std::string(line));
  }
}

void ServerConnection::Send(Buffer frame) {
  std::shared_ptr<Socket> s;
  {
    std::lock_guard lock(mutex);
    s = socket;
  }
  if (s) (void)SendFrame(s, std::move(frame));
}

void ServerConnection::OnClose() {
  std::shared_ptr<Socket> s;
  {
    std::lock_guard lock(mutex);
    s = std::move(socket);
  }
  if (auto impl = server.lock()) {
    std::lock_guard lock(impl->mutex);
    impl->connections.erase(shared_from_this());
  }
}

void ServerConnection::OnMessage(Buffer frame) {
  const Clock::time_point arrived = Clock::now();
  last_active_ns.store(NowNs(arrived), std::memory_order_relaxed);
  std::shared_ptr<Server::Impl> impl = server.lock();
  if (!impl) return;
  Result<FrameHeader> header = DecodeHeader(frame);
  if (!header.ok()) {
    impl->Log("dropping connection: " + header.status().ToString());
    std::shared_ptr<Socket> s;
    {
      std::lock_guard lock(mutex);
      s = socket;
    }
    if (s) s->Close();
    return;
  }
  switch (header->kind) {
    case FrameKind::kHello: {
      FrameHeader ack;
      ack.kind = FrameKind::kHelloAck;
      ack.call_id = header->call_id;
      Result<Buffer> reply = MakeFrame(ack, impl->method_table);
      if (reply.ok()) Send(std::move(reply).value());
      return;
    }
    case FrameKind::kHeartbeat: {
      impl->Count(&ServerStats::heartbeats);
      // Reuse the heartbeat's own buffer for the answer.
      header->kind = FrameKind::kHeartbeatAck;
      EncodeHeader(*header, frame);
      frame.Resize(kFrameHeaderBytes);
      Send(std::move(frame));
      return;
    }
    case FrameKind::kRequest:
      break;
    default:
      return;  // a client sends nothing else; ignore rather than fail
  }
  impl->Count(&ServerStats::requests);
  Clock::time_point deadline = DeadlineFromBudget(header->budget_us, arrived);
  if (header->method_id == 0 || header->method_id > impl->methods.size()) {
    impl->Count(&ServerStats::unknown_method);
    FrameHeader reply;
    reply.kind = FrameKind::kResponse;
    reply.call_id = header->call_id;
    reply.status = static_cast<uint32_t>(StatusCode::kNotFound);
    Result<Buffer> out = MakeFrame(reply, "no method with id " + std::to_string(header->method_id));
    if (out.ok()) Send(std::move(out).value());
    return;
  }
  ServerCall call(shared_from_this(), header->call_id, header->method_id - 1, deadline,
                  (header->flags & kFlagIdempotent) != 0, MessageFrame::Wrap(std::move(frame)));
  if (impl->options.worker_threads > 0) {
    impl->Enqueue(std::move(call));
  } else {
    Execute(std::move(call));
  }
}

void ServerConnection::Execute(ServerCall call) {
  std::shared_ptr<Server::Impl> impl = server.lock();
  if (!impl) return;
  if (call.expired()) {
    // The caller has given up: running the handler would only add load.
    impl->Count(&ServerStats::dropped_expired);
    call.answered_ = true;  // nobody waits for an answer
    return;
  }
  impl->Count(&ServerStats::executed);
  const Handler& handler = impl->methods[call.method_index_].handler;
  handler(std::move(call));
}

void Server::Impl::Enqueue(ServerCall call) {
  const size_t bytes = call.request().size();
  size_t queued = 0;
  {
    std::lock_guard lock(queue_mutex);
    if (stopping) return;  // the call answers Internal as it is destroyed; the socket is closing
    const size_t limit = options.max_queued_request_bytes;
    if (limit == 0 || queued_bytes == 0 || queued_bytes + bytes <= limit) {
      queued_bytes += bytes;
      queue.push_back(std::move(call));
      queue_changed.notify_one();
      return;
    }
    queued = queued_bytes;
  }
  Count(&ServerStats::refused_busy);
  call.Fail(ResourceExhausted("server busy: " + std::to_string(queued) +
                              " bytes of requests wait for a worker, a request of " +
                              std::to_string(bytes) + " would pass max_queued_request_bytes (" +
                              std::to_string(options.max_queued_request_bytes) + ")"));
}

void Server::Impl::WorkerLoop() {
  // Named so that per-thread CPU (top -H, bx demo's split) tells handler work from transport.
  pthread_setname_np(pthread_self(), "bx-rpc-worker");
  for (;;) {
    std::unique_lock lock(queue_mutex);
    queue_changed.wait(lock, [&] { return stopping || !queue.empty(); });
    if (stopping) return;
    ServerCall call = std::move(queue.front());
    queue.pop_front();
    queued_bytes -= call.request().size();
    lock.unlock();
    std::shared_ptr<ServerConnection> connection = ServerConnection::Of(call);
    connection->Execute(std::move(call));
  }
}

void Server::Impl::IdleReaperLoop() {
  pthread_setname_np(pthread_self(), "bx-rpc-idle");
  const auto timeout = options.idle_timeout;
  // A connection is closed between timeout and timeout + period after it went quiet.
  const auto period = std::max(timeout / 8, std::chrono::milliseconds(1));
  std::unique_lock lock(mutex);
  while (!stopped) {
    idle_wake.wait_for(lock, period, [&] { return stopped; });
    if (stopped) return;
    const int64_t quiet_since =
        ServerConnection::NowNs() -
        std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
    std::vector<std::shared_ptr<ServerConnection>> idle;
    for (const auto& connection : connections) {
      if (connection->last_active_ns.load(std::memory_order_relaxed) < quiet_since) {
        idle.push_back(connection);
      }
    }
    if (idle.empty()) continue;
    stats.idle_closed += idle.size();
    lock.unlock();
    for (const auto& connection : idle) {
      std::shared_ptr<Socket> socket;
      {
        std::lock_guard socket_lock(connection->mutex);
        socket = connection->socket;
      }
      // Its close handler removes it from `connections`.
      if (socket) socket->Close();
    }
    lock.lock();
  }
}

Result<std::unique_ptr<Server>> Server::Create(ServerOptions options) {
  if (options.idle_timeout < std::chrono::milliseconds::zero()) {
    return InvalidArgument("rpc server: idle_timeout must be >= 0");
  }
  auto impl = std::make_shared<Impl>();
  impl->options = std::move(options);
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::~Server() {
  Stop();
}

Status Server::AddMethod(std::string name, Handler handler) {
  if (impl_->started) return FailedPrecondition("rpc server: AddMethod after Start");
  if (name.empty() || name.find_first_of(" \n") != std::string::npos) {
    return InvalidArgument("rpc method name '" + name + "' is empty or has a space or newline");
  }
  if (impl_->method_ids.count(name)) return InvalidArgument("rpc method " + name + " exists");
  impl_->methods.push_back({name, std::move(handler)});
  impl_->method_ids.emplace(std::move(name), static_cast<uint32_t>(impl_->methods.size()));
  return Status::Ok();
}

Status Server::Start(const std::vector<std::string>& urls) {
  Impl& impl = *impl_;
  if (impl.started) return FailedPrecondition("rpc server: started twice");
  impl.started = true;
  impl.method_table = EncodeMethodTable(impl.method_ids);
  for (int i = 0; i < impl.options.worker_threads; ++i) {
    impl.workers.emplace_back([raw = impl_.get()] { raw->WorkerLoop(); });
  }
  if (impl.options.idle_timeout > std::chrono::milliseconds::zero()) {
    impl.idle_reaper = std::thread([raw = impl_.get()] { raw->IdleReaperLoop(); });
  }
  std::weak_ptr<Impl> weak = impl_;
  for (const std::string& text : urls) {
    BX_ASSIGN_OR_RETURN(Url url, ParseUrl(text));
    std::unique_ptr<Transport>& transport = url.scheme == "rdma" ? impl.rdma : impl.tcp;
    if (!transport) {
      auto created = transport::CreateTransport(url.scheme, impl.options.transport);
      if (!created.ok()) return created.status().WithContext("rpc server");
      transport = std::move(created).value();
    }
    std::string scheme = url.scheme;
    auto listener = transport->Listen(text, [weak, scheme](const std::shared_ptr<Socket>& socket) {
      auto connection = std::make_shared<ServerConnection>();
      connection->server = weak;
      connection->socket = socket;
      connection->scheme = scheme;
      connection->privileged_peer = socket->privileged_peer();
      if (auto impl = weak.lock()) {
        std::lock_guard lock(impl->mutex);
        if (impl->stopped) {
          socket->Close();
        } else {
          impl->connections.insert(connection);
          ++impl->stats.connections;
        }
      }
      return SocketHandlers{
          [connection](Socket&, Buffer frame) { connection->OnMessage(std::move(frame)); },
          [connection](Socket&, const Status&) { connection->OnClose(); }};
    });
    if (!listener.ok()) return listener.status().WithContext("rpc server");
    (url.scheme == "rdma" ? impl.address.rdma_url : impl.address.tcp_url) = (*listener)->url();
    impl.listeners.push_back(std::move(listener).value());
  }
  return Status::Ok();
}

Status Server::StartOnAnyPorts(const std::string& host) {
  return Start({"rdma://" + host + ":0", "tcp://" + host + ":0"});
}

ReplicaAddress Server::address() const {
  return impl_->address;
}

void Server::Stop() {
  Impl& impl = *impl_;
  std::unordered_set<std::shared_ptr<ServerConnection>> connections;
  {
    std::lock_guard lock(impl.mutex);
    if (impl.stopped) return;
    impl.stopped = true;
    connections.swap(impl.connections);
  }
  impl.idle_wake.notify_all();
  if (impl.idle_reaper.joinable()) impl.idle_reaper.join();
  for (auto& listener : impl.listeners) listener->Close();
  for (const auto& connection : connections) {
    std::shared_ptr<Socket> socket;
    {
      std::lock_guard lock(connection->mutex);
      socket = connection->socket;
    }
    if (socket) socket->Close();
  }
  std::deque<ServerCall> dropped;
  {
    std::lock_guard lock(impl.queue_mutex);
    impl.stopping = true;
    dropped.swap(impl.queue);
  }
  impl.queue_changed.notify_all();
  for (std::thread& worker : impl.workers) worker.join();
  dropped.clear();
  impl.listeners.clear();
  // Destroying a transport joins its I/O threads: no handler runs after this.
  impl.rdma.reset();
  impl.tcp.reset();
}

ServerStats Server::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

}  // namespace bx::rpc
