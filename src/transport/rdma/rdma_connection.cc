#include "transport/rdma/rdma_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "base/dcheck.h"
#include "transport/rdma/rdma_socket.h"
#include "transport/rdma/rdma_transport_impl.h"

namespace bx::rdma {

RdmaConnection::RdmaConnection(RdmaTransportImpl& transport, std::shared_ptr<IoThread> io,
                               std::string peer, std::shared_ptr<AcceptState> accept)
    : transport_(transport),
      io_(std::move(io)),
      poller_(engine::EnginePoller::Of(*io_)),
      peer_(std::move(peer)),
      accept_(std::move(accept)) {
  if (initiator()) ids_in_use_.assign(engine::kMaxChannels, false);
}

RdmaConnection::~RdmaConnection() {
  // Destroyed after Teardown, or never registered (a failed handshake): no I/O thread refers to
  // it. The engine fails while its QP exists, and is freed after it (Engine::~Engine).
  if (engine_) engine_->Fail(Aborted("connection closed"), /*notify=*/false);
  qp_.reset();
  engine_.reset();
  if (bootstrap_fd_ >= 0) close(bootstrap_fd_);
}

void RdmaConnection::Attach(verbs::RcQueuePair qp, std::unique_ptr<engine::Engine> engine,
                            int bootstrap_fd) {
  qp_.emplace(std::move(qp));
  engine_ = std::move(engine);
  bootstrap_fd_ = bootstrap_fd;
}

size_t RdmaConnection::max_message_bytes() const {
  return transport_.options().max_message_bytes;
}

engine::Engine::Callbacks RdmaConnection::EngineCallbacks() {
  // The engine lives inside this connection, so `this` outlives every callback.
  engine::Engine::Callbacks cb;
  cb.on_message = [this](engine::ChannelId c, Buffer m) { OnMessage(c, std::move(m)); };
  cb.on_remote_write = [this](engine::ChannelId c, uint16_t tag) { OnRemoteWrite(c, tag); };
  cb.on_channel_open = [this](engine::ChannelId c) { OnChannelOpen(c); };
  cb.on_channel_accepted = [this](engine::ChannelId c) {
    if (RdmaSocket* socket = Find(c)) socket->OnAccepted();
  };
  cb.on_channel_closed = [this](engine::ChannelId c) { OnChannelClosed(c); };
  cb.on_channel_released = [this](engine::ChannelId c) { OnChannelReleased(c); };
  cb.on_failure = [this](const Status& why) {
    // Not from inside the engine's own call stack: tear down on the next turn of the loop.
    auto self = shared_from_this();
    io_->Post([self, why] { self->Teardown(why); });
  };
  return cb;
}

void RdmaConnection::Register() {
  BX_DCHECK(io_->OnLoopOrEnded());
  poller_.AddEngine(engine_.get());
  registered_ = true;
}

void RdmaConnection::Activate() {
  BX_DCHECK(io_->OnLoopOrEnded());
  if (torn_down_) return;
  engine_->Start();
  poller_.MarkDirty(engine_.get());
  // Refused only once the thread has stopped: then nothing would ever read the connection.
  if (Status s = io_->Watch(bootstrap_fd_, [this] { OnBootstrapReadable(); }); !s.ok()) {
    Teardown(s);
  }
}

Status RdmaConnection::OpenSocket(const std::shared_ptr<RdmaSocket>& socket,
                                  SocketHandlers handlers) {
  BX_DCHECK(io_->OnLoopOrEnded());
  if (torn_down_) return Unavailable("the connection to " + peer_ + " has ended");
  // Next free id after the last one handed out, so a just-closed id rests as long as possible.
  for (uint32_t tries = 0; tries < engine::kMaxChannels; ++tries) {
    engine::ChannelId id = next_id_;
    next_id_ = engine::ChannelId((next_id_ + 1) % engine::kMaxChannels);
    if (ids_in_use_[id]) continue;
    BX_RETURN_IF_ERROR(engine_->OpenChannel(id));
    ids_in_use_[id] = true;
    socket->Bind(id, std::move(handlers), /*accepted=*/false);
    sockets_[id] = socket;
    poller_.MarkDirty(engine_.get());
    return Status::Ok();
  }
  return ResourceExhausted("all " + std::to_string(engine::kMaxChannels) +
                           " channels of the engine to " + peer_ + " are in use");
}

void RdmaConnection::CloseSocket(engine::ChannelId channel) {
  BX_DCHECK(io_->OnLoopOrEnded());
  sockets_.erase(channel);
  if (torn_down_) return;
  engine_->CloseChannel(channel, Aborted("socket closed"));
  poller_.MarkDirty(engine_.get());
}

RdmaSocket* RdmaConnection::Find(engine::ChannelId channel) {
  auto it = sockets_.find(channel);
  return it == sockets_.end() ? nullptr : it->second.get();
}

void RdmaConnection::OnMessage(engine::ChannelId channel, Buffer message) {
  if (RdmaSocket* socket = Find(channel)) socket->OnMessage(std::move(message));
}

void RdmaConnection::OnRemoteWrite(engine::ChannelId channel, uint16_t tag) {
  if (RdmaSocket* socket = Find(channel)) socket->OnRemoteWrite(tag);
}

void RdmaConnection::OnChannelOpen(engine::ChannelId channel) {
  BX_DCHECK(io_->OnLoopOrEnded());
  if (torn_down_ || initiator() || accept_->closed.load()) {
    // Only the connecting side opens channels; a closed listener accepts no more sockets.
    engine_->CloseChannel(channel, Aborted("not accepting"));
    return;
  }
  auto socket = std::make_shared<RdmaSocket>(shared_from_this(), peer_, max_message_bytes(),
                                             transport_.options().max_queued_bytes);
  if (privileged_peer_) socket->MarkPrivilegedPeer();
  sockets_[channel] = socket;
  // Bound before the engine delivers the channel's first message (the next completion).
  socket->Bind(channel, accept_->on_accept(socket), /*accepted=*/true);
  engine_->AcceptChannel(channel);
}

void RdmaConnection::OnChannelClosed(engine::ChannelId channel) {
  auto it = sockets_.find(channel);
  if (it == sockets_.end()) return;
  auto socket = std::move(it->second);
  sockets_.erase(it);
  socket->Teardown(Aborted("peer " + peer_ + " closed the socket"), false);  // or refused it
}

void RdmaConnection::OnChannelReleased(engine::ChannelId channel) {
  if (torn_down_ || !initiator()) return;
  ids_in_use_[channel] = false;
  // Outside the engine's call stack: the last release may close this connection.
  auto self = shared_from_this();
  io_->Post([self] { self->transport_.ReleaseUser(self); });
}

void RdmaConnection::OnBootstrapReadable() {
  BX_DCHECK(io_->OnLoopOrEnded());
  uint8_t buf[64];
  ssize_t n = recv(bootstrap_fd_, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n == 0) {
    Teardown(Aborted("peer " + peer_ + " closed the connection"));
  } else if (n < 0) {
    Teardown(Status::FromErrno(errno, "bootstrap connection to " + peer_));
  } else {
    Teardown(DataLoss("unexpected bytes from " + peer_ + " on the bootstrap connection"));
  }
}

std::map<std::string, uint64_t> RdmaConnection::Counters() const {
  if (!engine_) return final_counters_;
  auto out = engine_->counters().ToMap();
  out["sockets_on_engine"] = sockets_.size();
  return out;
}

void RdmaConnection::Teardown(const Status& why) {
  BX_DCHECK(io_->OnLoopOrEnded());
  if (torn_down_.exchange(true)) return;
  auto self = shared_from_this();  // the transport drops its reference now
  // What refers to the transport happens now: it may be destroyed before Release runs.
  transport_.Forget(this);
  peer_slot_.Release();  // the peer's address may connect again
  // The engine may be inside one of its own calls (a callback whose handler closed or destroyed
  // the transport): it is failed and freed on the next turn of the loop, which has returned.
  io_->Post([self, why] { self->Release(why); });
}

void RdmaConnection::Release(const Status& why) {
  BX_DCHECK(io_->OnLoopOrEnded());
  if (engine_) {
    final_counters_ = Counters();
    if (registered_) poller_.RemoveEngine(engine_.get());
    engine_->Fail(why, /*notify=*/false);  // pending sends complete with the reason first
  }
  auto sockets = std::move(sockets_);
  sockets_.clear();
  for (auto& [channel, socket] : sockets) socket->Teardown(why, false);
  if (bootstrap_fd_ >= 0) {
    io_->Unwatch(bootstrap_fd_);
    close(bootstrap_fd_);  // the peer sees EOF
    bootstrap_fd_ = -1;
  }
  // The QP first: once it is destroyed the NIC touches none of the buffers the engine kept.
  qp_.reset();
  engine_.reset();
}

}  // namespace bx::rdma
