// ServerConnection::SendResponse: every call gets an answer. A response the socket refuses
// (too large for the transport, or its send queue full) becomes a small ResourceExhausted
// response; when the queue is full that one is owed and sent once a send completes.
#include <string>

#include "rpc/server_impl.h"

namespace bx::rpc {
namespace {

// Owed answers a connection may hold; past this the client reads so slowly that closing its
// connection (failing its calls at once) is the better answer.
constexpr size_t kMaxOwedResponses = 4096;

}  // namespace

StatusCode ServerConnection::SendFrame(const std::shared_ptr<Socket>& socket, Buffer frame) {
  // Refusals run the callback before Send returns (transport.h); completions may run later on
  // the I/O thread, so the refusal is read from a cell both can reach.
  auto refusal = std::make_shared<std::atomic<StatusCode>>(StatusCode::kOk);
  std::weak_ptr<ServerConnection> weak = weak_from_this();
  last_active_ns.store(NowNs(), std::memory_order_relaxed);
  socket->Send(std::move(frame), [weak, refusal](const Status& status) {
    if (!status.ok()) {
      refusal->store(status.code());
    } else if (auto self = weak.lock()) {
      self->last_active_ns.store(NowNs(), std::memory_order_relaxed);
      self->OnSendCompleted();
    }
  });
  return refusal->load();
}

void ServerConnection::SendResponse(Buffer frame, uint64_t call_id) {
  std::shared_ptr<Socket> s;
  {
    std::lock_guard lock(mutex);
    s = socket;
  }
  if (!s) return;
  const std::string size = std::to_string(frame.size());
  std::string why;
  switch (SendFrame(s, std::move(frame))) {
    case StatusCode::kInvalidArgument:
      why = "response of " + size +
            " bytes exceeds the transport's message limit "
            "(max_message_bytes)";
      break;
    case StatusCode::kResourceExhausted:
      why = "response of " + size +
            " bytes refused: the connection's send queue is full "
            "(max_queued_bytes; the client reads its responses more slowly than it asks for them)";
      break;
    default:
      return;  // sent, or the socket has ended (its close tells the caller)
  }
  if (auto impl = server.lock()) impl->Count(&ServerStats::responses_refused);
  Owe(call_id, std::move(why));
}

void ServerConnection::Owe(uint64_t call_id, std::string why) {
  bool close = false;
  {
    std::lock_guard lock(mutex);
    if (owed_.size() >= kMaxOwedResponses) {
      close = true;
    } else {
      owed_.push_back({call_id, std::move(why)});
    }
  }
  if (close) {
    if (auto impl = server.lock())
      impl->Log("closing a connection that owes " + std::to_string(kMaxOwedResponses) +
                " refused responses");
    std::shared_ptr<Socket> s;
    {
      std::lock_guard lock(mutex);
      s = socket;
    }
    if (s) s->Close();  // the client fails every outstanding call at once
    return;
  }
  FlushOwed();
}

void ServerConnection::OnSendCompleted() {
  {
    std::lock_guard lock(mutex);
    ++completions_;
    if (owed_.empty()) return;
  }
  FlushOwed();
}

// Sends owed answers in order until the socket refuses one. A refusal means the queue holds
// something, whose completion calls here again; one that completed while this thread was
// sending (and found flushing_ set) is seen through completions_, and the loop retries.
void ServerConnection::FlushOwed() {
  for (;;) {
    Owed next;
    std::shared_ptr<Socket> s;
    uint64_t completions_before = 0;
    {
      std::lock_guard lock(mutex);
      if (flushing_ || owed_.empty() || !socket) return;
      flushing_ = true;
      next = std::move(owed_.front());
      owed_.pop_front();
      s = socket;
      completions_before = completions_;
    }
    FrameHeader header;
    header.kind = FrameKind::kResponse;
    header.call_id = next.call_id;
    header.status = static_cast<uint32_t>(StatusCode::kResourceExhausted);
    Result<Buffer> frame = MakeFrame(header, next.why);
    const StatusCode refused =
        frame.ok() ? SendFrame(s, std::move(frame).value()) : StatusCode::kResourceExhausted;
    std::lock_guard lock(mutex);
    flushing_ = false;
    if (refused == StatusCode::kResourceExhausted) {
      owed_.push_front(std::move(next));
      if (completions_ == completions_before) return;  // a later completion flushes
    }
  }
}

}  // namespace bx::rpc
