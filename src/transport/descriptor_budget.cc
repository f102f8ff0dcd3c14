#include "transport/descriptor_budget.h"

#include <sys/resource.h>

#include <algorithm>

namespace bx::transport {
namespace {

constexpr size_t kMinBudget = 16;

// RLIMIT_NOFILE's soft limit after raising it to the hard limit where allowed; 0: unreadable.
size_t RaiseAndReadLimit() {
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0) return 0;
  if (nofile.rlim_cur < nofile.rlim_max) {
    rlimit raised = nofile;
    raised.rlim_cur = nofile.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) nofile = raised;
  }
  return nofile.rlim_cur == RLIM_INFINITY ? size_t(1) << 20 : size_t(nofile.rlim_cur);
}

}  // namespace

size_t UnauthenticatedDescriptorBudget(size_t cap) {
  static const size_t soft = RaiseAndReadLimit();  // once per process
  if (soft == 0) return cap;                       // unreadable: the listener's own bound
  return std::min(cap, std::max(kMinBudget, soft / 4));
}

}  // namespace bx::transport
