#include "transport/rdma/rdma_socket.h"

#include "base/dcheck.h"

namespace bx::rdma {

RdmaSocket::RdmaSocket(std::shared_ptr<RdmaConnection> connection, std::string peer,
                       size_t max_message_bytes, size_t max_queued_bytes)
    : connection_(std::move(connection)),
      io_(connection_->io_thread()),
      peer_(std::move(peer)),
      max_message_bytes_(max_message_bytes),
      max_queued_bytes_(max_queued_bytes) {}

RdmaSocket::~RdmaSocket() = default;

void RdmaSocket::Bind(engine::ChannelId channel, SocketHandlers handlers, bool accepted) {
  BX_DCHECK(io_->OnLoopOrEnded());
  channel_ = channel;
  handlers_ = std::move(handlers);
  if (accepted) OnAccepted();
}

void RdmaSocket::OnAccepted() {
  BX_DCHECK(io_->OnLoopOrEnded());
  std::lock_guard lock(accept_mu_);
  if (!accept_result_) accept_result_ = Status::Ok();
  accept_cv_.notify_all();
}

Status RdmaSocket::WaitAccepted(std::chrono::steady_clock::time_point deadline) {
  BX_DCHECK(!io_->IsCurrent());  // it would wait for itself
  std::unique_lock lock(accept_mu_);
  if (!accept_cv_.wait_until(lock, deadline, [&] { return accept_result_.has_value(); }))
    return DeadlineExceeded("peer " + peer_ + " did not accept the socket in time");
  return *accept_result_;
}

void RdmaSocket::Send(Buffer message, SendCallback done) {
  Submit(std::move(message), std::nullopt, 0, std::move(done));
}

void RdmaSocket::WriteTo(Buffer message, RemoteBuffer target, uint16_t tag, SendCallback done) {
  if (message.size() > target.length) {
    if (done)
      done(InvalidArgument("a write of " + std::to_string(message.size()) +
                           " bytes does not fit the remote buffer of " +
                           std::to_string(target.length)));
    return;
  }
  Submit(std::move(message), target, tag, std::move(done));
}

void RdmaSocket::OnRemoteWrite(uint16_t tag) {
  BX_DCHECK(io_->OnLoopOrEnded());
  if (handlers_.on_remote_write) handlers_.on_remote_write(*this, tag);
}

void RdmaSocket::Submit(Buffer message, std::optional<RemoteBuffer> target, uint16_t tag,
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
  // Back-pressure is a high-water mark: a message is taken while the queue holds less than the
  // budget, whatever its own size, so a large reply is not refused for a heartbeat queued ahead
  // of it. The queue is bounded by max_queued_bytes + max_message_bytes.
  size_t queued = queued_bytes_.load(std::memory_order_acquire);
  if (queued >= max_queued_bytes_) {
    if (done)
      done(ResourceExhausted("send queue of " + peer_ + " holds " + std::to_string(queued) +
                             " bytes, the limit is " + std::to_string(max_queued_bytes_)));
    return;
  }
  queued_bytes_.fetch_add(size, std::memory_order_acq_rel);
  // One allocation: the engine's node, queued here until the I/O thread takes it. The
  // completion holds the socket, which so outlives every message it took.
  engine::OutgoingMessage outgoing{
      std::move(message),
      engine::SendCompletion(std::move(done), &RdmaSocket::SendDone, shared_from_this(), size)};
  std::unique_ptr<Outgoing> out = target
                                      ? engine::Engine::NewWrite(std::move(outgoing), *target, tag)
                                      : engine::Engine::NewOutgoing(std::move(outgoing));
  bool first = false;
  {
    std::lock_guard lock(pending_mu_);
    if (!closing_) {
      // The first message into an empty queue posts the drain; later ones ride with it.
      first = pending_head_ == nullptr;
      Outgoing* raw = out.get();
      (pending_tail_ != nullptr ? pending_tail_->next : pending_head_) = std::move(out);
      pending_tail_ = raw;
    }
  }
  if (out != nullptr) {  // Close() came first
    engine::SendCompletion completion = std::move(out->message.done);
    out.reset();
    completion(Aborted("socket closed"));
    return;
  }
  // A plain pointer, so the task fits std::function's own storage: the message just queued
  // holds the socket until this drain has taken it.
  if (first) io_->Post([this] { DrainPending(); });
}

void RdmaSocket::SendDone(void* owner, size_t bytes, SendCallback& done, const Status& status) {
  static_cast<RdmaSocket*>(owner)->queued_bytes_.fetch_sub(bytes, std::memory_order_acq_rel);
  if (done) done(status);
}

void RdmaSocket::DrainPending() {
  BX_DCHECK(io_->OnLoopOrEnded());
  auto self = shared_from_this();  // a completion below may drop the last other reference
  std::unique_ptr<Outgoing> head;
  {
    std::lock_guard lock(pending_mu_);
    head = std::move(pending_head_);
    pending_tail_ = nullptr;
  }
  bool queued = false;
  while (head != nullptr) {
    std::unique_ptr<Outgoing> next = std::move(head->next);
    if (torn_down_) {
      engine::SendCompletion completion = std::move(head->message.done);
      head.reset();
      completion(status());
    } else {
      connection_->engine().Enqueue(channel_, std::move(head));
      queued = true;
    }
    head = std::move(next);
  }
  if (queued && !torn_down_) connection_->poller().MarkDirty(&connection_->engine());
}

Result<Buffer> RdmaSocket::Receive(std::chrono::milliseconds timeout) {
  return queue_.Pop(timeout);
}

void RdmaSocket::Close() {
  {
    std::lock_guard lock(pending_mu_);
    closing_ = true;  // later sends fail at once; earlier ones are drained before the close
  }
  auto self = shared_from_this();
  io_->Post([self] {
    if (self->torn_down_) return;
    self->connection_->CloseSocket(self->channel_);
    self->Teardown(Status::Ok(), /*local_close=*/true);
  });
}

Status RdmaSocket::status() const {
  std::lock_guard lock(status_mu_);
  return status_;
}

std::map<std::string, uint64_t> RdmaSocket::counters() const {
  {
    std::lock_guard lock(status_mu_);
    if (ended_) return final_counters_;  // without the I/O thread, which may have stopped
  }
  std::map<std::string, uint64_t> out;
  io_->RunAndWait([&] {
    if (torn_down_) {
      std::lock_guard lock(status_mu_);
      out = final_counters_;
    } else {
      out = connection_->Counters();
    }
  });
  return out;
}

void RdmaSocket::OnMessage(Buffer message) {
  BX_DCHECK(io_->OnLoopOrEnded());
  if (handlers_.on_message) {
    handlers_.on_message(*this, std::move(message));
  } else {
    queue_.Push(std::move(message));
  }
}

void RdmaSocket::Teardown(const Status& why, bool local_close) {
  BX_DCHECK(io_->OnLoopOrEnded());
  if (torn_down_) return;
  torn_down_ = true;
  auto self = shared_from_this();  // the connection may have dropped its reference
  const Status final_status = local_close ? Aborted("socket closed") : why;
  {
    std::lock_guard lock(status_mu_);
    status_ = final_status;
    ended_ = true;
    final_counters_ = connection_->Counters();
  }
  queue_.Close(final_status);
  bool was_accepted;
  {
    std::lock_guard lock(accept_mu_);
    was_accepted = accept_result_.has_value() && accept_result_->ok();
    if (!accept_result_) accept_result_ = why.ok() ? Aborted("socket closed") : why;
    accept_cv_.notify_all();
  }
  // A socket the peer never accepted was never handed out: Connect reports why instead.
  if (was_accepted && handlers_.on_close)
    handlers_.on_close(*this, local_close ? Status::Ok() : why);
}

}  // namespace bx::rdma
