#include "transport/message_queue.h"

#include <string>
#include <utility>

namespace bx::transport {

void MessageQueue::Push(Buffer message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!close_reason_.ok()) return;
    messages_.push_back(std::move(message));
  }
  ready_.notify_one();
}

void MessageQueue::Close(Status reason) {
  if (reason.ok()) reason = Aborted("socket closed");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (close_reason_.ok()) close_reason_ = std::move(reason);
  }
  ready_.notify_all();
}

Result<Buffer> MessageQueue::Pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !messages_.empty() || !close_reason_.ok(); });
  if (!messages_.empty()) {
    Buffer message = std::move(messages_.front());
    messages_.pop_front();
    return message;
  }
  if (!close_reason_.ok()) return close_reason_;
  return Status(StatusCode::kDeadlineExceeded,
                "no message within " + std::to_string(timeout.count()) + " ms");
}

size_t MessageQueue::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_.size();
}

}  // namespace bx::transport
