// RefusalLog: one stderr line per refused peer, but at most one per interval, then how many
// were left unsaid. A listener under a flood of hostile connections must not turn it into a
// flood of log lines (and of stderr writes on its accept path).
//
// Threads: Log from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "bx/status.h"

namespace bx::transport {

class RefusalLog {
 public:
  // `who` starts each line ("bx tcp", "bx rdma").
  explicit RefusalLog(std::string who,
                      std::chrono::steady_clock::duration interval = std::chrono::seconds(1))
      : who_(std::move(who)), interval_(interval) {}

  void Log(const std::string& peer, const Status& why);

 private:
  const std::string who_;
  const std::chrono::steady_clock::duration interval_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_;  // guarded by mu_
  uint64_t unsaid_ = 0;                         // guarded by mu_
};

}  // namespace bx::transport
