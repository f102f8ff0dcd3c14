#include "transport/descriptor_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <mutex>

namespace bx::transport {
namespace {

constexpr size_t kMinBudget = 16;
std::atomic<size_t> limit{0};

size_t ReadAndRaiseLimit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit nofile{};
    if (getrlimit(RLIMIT_NOFILE, &nofile) != 0) return;
    if (nofile.rlim_cur < nofile.rlim_max) {
      rlimit raised = nofile;
      raised.rlim_cur = nofile.rlim_max;
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) nofile = raised;
    }
    limit.store(nofile.rlim_cur == RLIM_INFINITY ? size_t(1) << 20 : size_t(nofile.rlim_cur));
  });
  return limit.load();
}

}  // namespace

size_t UnauthenticatedDescriptorBudget(size_t cap) {
  const size_t soft = ReadAndRaiseLimit();
  if (soft == 0) return cap;  // unreadable: the listener's own bound
  return std::min(cap, std::max(kMinBudget, soft / 4));
}

size_t DescriptorLimit() {
  return limit.load();
}

}  // namespace bx::transport
