#include "transport/rdma/rdma_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "transport/rdma/rdma_transport_impl.h"

namespace bx::rdma {

RdmaSocket::RdmaSocket(RdmaTransportImpl& transport, engine::IoThread& io, std::string peer,
                       size_t max_message_bytes, size_t max_queued_bytes)
    : transport_(transport),
      io_(io),
      peer_(std::move(peer)),
      max_message_bytes_(max_message_bytes),
      max_queued_bytes_(max_queued_bytes) {}

RdmaSocket::~RdmaSocket() {
  // A socket is destroyed after Teardown, or never registered (a failed handshake): either way
  // no I/O thread refers to it.
  engine_.reset();
  qp_.reset();
  if (bootstrap_fd_ >= 0) close(bootstrap_fd_);
}

void RdmaSocket::Attach(verbs::RcQueuePair qp, std::unique_ptr<engine::Engine> engine,
                        int bootstrap_fd) {
  qp_.emplace(std::move(qp));
  engine_ = std::move(engine);
  bootstrap_fd_ = bootstrap_fd;
}

void RdmaSocket::Send(Buffer message, SendCallback done) {
  Submit(std::move(message), std::nullopt, 0, std::move(done));
}

void RdmaSocket::WriteTo(Buffer message, engine::RemoteBuffer target, uint16_t tag,
                         SendCallback done) {
  Submit(std::move(message), target, tag, std::move(done));
}

void RdmaSocket::SetRemoteWriteHandler(std::function<void(uint16_t)> handler) {
  // Often called from on_accept, which already runs on the I/O thread.
  if (io_.InThread()) {
    remote_write_handler_ = std::move(handler);
  } else {
    io_.Run([&] { remote_write_handler_ = std::move(handler); });
  }
}

void RdmaSocket::OnRemoteWrite(uint16_t tag) {
  if (remote_write_handler_) remote_write_handler_(tag);
}

void RdmaSocket::Submit(Buffer message, std::optional<engine::RemoteBuffer> target, uint16_t tag,
                        SendCallback done) {
  if (Status s = status(); !s.ok()) {
    if (done) done(s);
    return;
  }
  const size_t size = message.size();
  if (size > max_message_bytes_) {
    if (done)
      done(InvalidArgument("message of " + std::to_string(size) + " bytes exceeds the limit of " +
                           std::to_string(max_message_bytes_)));
    return;
  }
  // Back-pressure: one message of any size is accepted into an empty queue.
  size_t queued = queued_bytes_.load(std::memory_order_acquire);
  if (queued > 0 && queued + size > max_queued_bytes_) {
    if (done)
      done(ResourceExhausted("send queue of " + peer_ + " holds " + std::to_string(queued) +
                             " bytes, the limit is " + std::to_string(max_queued_bytes_)));
    return;
  }
  queued_bytes_.fetch_add(size, std::memory_order_acq_rel);
  auto self = shared_from_this();
  auto* out = new engine::OutgoingMessage{
      std::move(message), [self, size, done = std::move(done)](const Status& s) {
        self->queued_bytes_.fetch_sub(size, std::memory_order_acq_rel);
        if (done) done(s);
      }};
  io_.Post([self, out, target, tag] {
    std::unique_ptr<engine::OutgoingMessage> m(out);
    if (self->torn_down_ || !self->engine_) {
      m->done(self->status());
      return;
    }
    if (target) {
      self->engine_->EnqueueWrite(std::move(*m), *target, tag);
    } else {
      self->engine_->Enqueue(std::move(*m));
    }
    self->io_.MarkDirty(self->engine_.get());
  });
}

Result<Buffer> RdmaSocket::Receive(std::chrono::milliseconds timeout) {
  return queue_.Pop(timeout);
}

void RdmaSocket::Close() {
  auto self = shared_from_this();
  io_.Post([self] { self->Teardown(Status::Ok(), /*local_close=*/true); });
}

Status RdmaSocket::status() const {
  std::lock_guard lock(status_mu_);
  return status_;
}

std::map<std::string, uint64_t> RdmaSocket::counters() const {
  std::map<std::string, uint64_t> out;
  auto read = [&] {
    std::lock_guard lock(status_mu_);
    out = engine_ ? engine_->counters().ToMap() : final_counters_;
  };
  if (io_.InThread()) {
    read();
  } else {
    io_.Run(read);
  }
  return out;
}

void RdmaSocket::Register(SocketHandlers handlers) {
  handlers_ = std::move(handlers);
  io_.AddEngine(engine_.get());
  registered_ = true;
}

void RdmaSocket::Activate() {
  if (torn_down_) return;
  engine_->Start();
  io_.MarkDirty(engine_.get());
  io_.Watch(bootstrap_fd_, [this] { OnBootstrapReadable(); });
}

void RdmaSocket::OnMessageFromEngine(Buffer message) {
  if (handlers_.on_message) {
    handlers_.on_message(*this, std::move(message));
  } else {
    queue_.Push(std::move(message));
  }
}

void RdmaSocket::OnBootstrapReadable() {
  uint8_t buf[64];
  ssize_t n = recv(bootstrap_fd_, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n == 0) {
    Teardown(Aborted("peer " + peer_ + " closed the connection"), false);
  } else if (n < 0) {
    Teardown(Status::FromErrno(errno, "bootstrap connection to " + peer_), false);
  } else {
    Teardown(DataLoss("unexpected bytes from " + peer_ + " on the bootstrap connection"), false);
  }
}

void RdmaSocket::Teardown(const Status& why, bool local_close) {
  if (torn_down_) return;
  torn_down_ = true;
  auto self = shared_from_this();  // the transport may drop its reference below
  const Status final_status = local_close ? Aborted("socket closed") : why;
  {
    std::lock_guard lock(status_mu_);
    status_ = final_status;
    if (engine_) final_counters_ = engine_->counters().ToMap();
  }
  if (engine_) {
    if (registered_) io_.RemoveEngine(engine_.get());
    engine_->Fail(final_status, /*notify=*/false);  // pending sends complete with the reason
  }
  if (bootstrap_fd_ >= 0) {
    io_.Unwatch(bootstrap_fd_);
    close(bootstrap_fd_);  // the peer sees EOF
    bootstrap_fd_ = -1;
  }
  {
    std::lock_guard lock(status_mu_);
    engine_.reset();
  }
  qp_.reset();
  queue_.Close(final_status);
  if (handlers_.on_close) handlers_.on_close(*this, local_close ? Status::Ok() : why);
  transport_.Forget(this);
}

}  // namespace bx::rdma
