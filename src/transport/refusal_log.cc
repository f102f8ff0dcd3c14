#include "transport/refusal_log.h"

#include <cstdio>

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
  std::fprintf(stderr, "%s: refused %s: %s%s\n", who_.c_str(), peer.c_str(), why.ToString().c_str(),
               more.c_str());
  last_ = now;
  unsaid_ = 0;
}

}  // namespace bx::transport
