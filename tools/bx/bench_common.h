// What the `bx bench` commands share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bx/init.h"
#include "bx/status.h"

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

}  // namespace bx::tools
