// What the `bx bench` commands share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "alloc/verbs_registrar.h"
#include "bx/bemalloc.h"
#include "bx/status.h"
#include "verbs/verbs.h"

namespace bx::tools {

// Initialises bemalloc on `device_name` (empty: BX_DEVICE or the first device) unless done.
inline Status EnsureMemoryPool(const std::string& device_name) {
  if (bemalloc::IsInitialized()) return Status::Ok();
  Result<verbs::Device> device = verbs::Device::Open(device_name);
  if (!device.ok()) return device.status().WithContext("bemalloc needs a device");
  // Leaked on purpose: bemalloc uses the device until the process exits.
  auto* kept = new verbs::Device(std::move(device).value());
  return bemalloc::Init(*kept);
}

// The q-quantile (0..1) of `samples` (sorted in place), nearest rank; 0 when empty.
inline double Quantile(std::vector<double>& samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  size_t rank = std::min(samples.size() - 1, size_t(q * double(samples.size())));
  return samples[rank];
}

}  // namespace bx::tools
