// ServerCall: one request on the server, answered exactly once.
#include "rpc/frame.h"
#include "rpc/server_impl.h"

namespace bx::rpc {

ServerCall::ServerCall(std::shared_ptr<ServerConnection> connection, uint64_t call_id,
                       uint32_t method_index, Clock::time_point deadline, bool idempotent,
                       Message request)
    : connection_(std::move(connection)),
      call_id_(call_id),
      method_index_(method_index),
      deadline_(deadline),
      started_(Clock::now()),
      idempotent_(idempotent),
      request_(std::move(request)) {}

ServerCall::ServerCall(ServerCall&& other) noexcept
    : connection_(std::move(other.connection_)),
      call_id_(other.call_id_),
      method_index_(other.method_index_),
      deadline_(other.deadline_),
      started_(other.started_),
      idempotent_(other.idempotent_),
      answered_(std::exchange(other.answered_, true)),
      request_(std::move(other.request_)) {}

ServerCall::~ServerCall() {
  if (!answered_ && connection_) Fail(Internal("rpc handler returned without an answer"));
}

const std::string& ServerCall::method() const {
  static const std::string kUnknown;
  auto impl = connection_ ? connection_->server.lock() : nullptr;
  return impl ? impl->methods[method_index_].name : kUnknown;
}

bool ServerCall::privileged_peer() const {
  return connection_ && connection_->privileged_peer;
}

std::string_view ServerCall::transport() const {
  return connection_ ? std::string_view(connection_->scheme) : std::string_view();
}

void ServerCall::Respond(Message response) {
  Finish(Status::Ok(), std::move(response));
}

void ServerCall::Fail(const Status& status) {
  Result<Message> text = Message::CopyOf(status.message());
  Finish(status.ok() ? Internal("Fail() with OK") : status,
         text.ok() ? std::move(text).value() : Message());
}

void ServerCall::Finish(const Status& status, Message response) {
  if (answered_ || !connection_) return;
  answered_ = true;
  std::shared_ptr<Server::Impl> impl = connection_->server.lock();
  if (!impl) return;
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard lock(impl->mutex);
    impl->stats.handler_latency[impl->methods[method_index_].name].Record(now - started_);
    if (now >= deadline_) {
      // The client has already failed this call: an answer would be thrown away there.
      ++impl->stats.late_responses;
      return;
    }
  }
  if (!response) {
    Result<Message> empty = Message::Allocate(0);
    if (!empty.ok()) return;
    response = std::move(empty).value();
  }
  FrameHeader header;
  header.kind = FrameKind::kResponse;
  header.call_id = call_id_;
  header.status = static_cast<uint32_t>(status.code());
  Buffer frame = MessageFrame::Take(response);
  EncodeHeader(header, frame);
  connection_->SendResponse(std::move(frame), call_id_);
}

}  // namespace bx::rpc
