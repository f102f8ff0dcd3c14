// The verbs self-check behind `bx selfcheck`: two devices, one RC connection between them, and
// one of each operation the engine relies on (SEND/RECV, RDMA WRITE, WRITE_WITH_IMM, RDMA READ),
// each verified byte for byte and completion field by completion field. Meant for the simnic
// (bxsim0 <-> bxsim1 in one process) but runs between any two ports that can reach each other.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "verbs/verbs.h"

namespace bx::verbs {

struct SelfCheckOptions {
  std::string device_a = "bxsim0";  // the requester
  std::string device_b = "bxsim1";  // the responder
  uint8_t port = 0;                 // 0: each device's first active port
  // How long to wait for one completion before declaring it lost.
  std::chrono::milliseconds completion_timeout{5000};
};

struct CheckResult {
  std::string name;  // "rdma write"
  bool passed = false;
  std::string detail;  // what was seen, or what went wrong
};

struct SelfCheckReport {
  std::string backend;  // "sim" or "system"
  std::string library;  // the .so used
  std::vector<CheckResult> checks;
  int passed() const;
  int failed() const;
};

// Runs the checks in order and stops at the first set-up failure (opening, connecting,
// registering), which is reported as a failed check. Uses Library::ForDevice(device_a), or `lib`.
// Call from one thread; it creates and destroys all its verbs objects itself.
SelfCheckReport RunSelfCheck(const SelfCheckOptions& options = {});
SelfCheckReport RunSelfCheck(Library& lib, const SelfCheckOptions& options = {});

}  // namespace bx::verbs
