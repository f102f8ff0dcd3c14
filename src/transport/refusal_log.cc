#include "transport/refusal_log.h"

#include "bx/log.h"

namespace bx::transport {

void RefusalLog::Log(const std::string& peer, const Status& why) {
  std::lock_guard lock(mu_);
  auto now = std::chrono::steady_clock::now();
  if (last_ != std::chrono::steady_clock::time_point{} && now - last_ < interval_) {
    ++unsaid_;
    return;
  }
  std::string more =
      unsaid_ == 0 ? "" : " (and " + std::to_string(unsaid_) + " more refused since)";
  bx::Log(LogLevel::kWarning, who_ + ": refused " + peer + ": " + why.ToString() + more);
  last_ = now;
  unsaid_ = 0;
}

}  // namespace bx::transport
