// What the `bx bench` commands share.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bx/init.h"
#include "bx/status.h"
#include "verbs/verbs.h"

namespace bx::tools {

// bx::Init on `device_name` (empty: BX_DEVICE or the first device); OK when already done there.
inline Status EnsureMemoryPool(const std::string& device_name) {
  InitOptions options;
  options.device = device_name;
  return Init(options);
}

// The q-quantile (0..1) of `samples` (sorted in place), nearest rank; 0 when empty.
inline double Quantile(std::vector<double>& samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  size_t rank = std::min(samples.size() - 1, size_t(q * double(samples.size())));
  return samples[rank];
}

// CPU the whole process has used, in ns.
inline uint64_t ProcessCpuNs() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return uint64_t(now.tv_sec) * 1000000000 + uint64_t(now.tv_nsec);
}

// CPU the simnic's hardware threads have used (0 on a real NIC or without the simnic): host CPU
// is ProcessCpuNs() minus this, since on hardware the NIC does that work.
inline uint64_t HardwareCpuNs() {
  Result<verbs::Library*> library = verbs::Library::Get();
  if (!library.ok() || (*library)->sim().hardware_cpu_ns == nullptr) return 0;
  return (*library)->sim().hardware_cpu_ns();
}

}  // namespace bx::tools
