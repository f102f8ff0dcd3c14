// What the `bx bench` commands share.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
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

// `count` processes that keep a core busy each until this object goes: a host whose cores an
// application uses (a trainer), which is where a thread that polls by yielding loses a whole
// scheduler slice each time it yields. Their CPU is not this process's, so host CPU per call
// stays ours.
class CpuHogs {
 public:
  explicit CpuHogs(int count) {
    for (int i = 0; i < count; ++i) {
      pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the benchmark
        for (;;) asm volatile("");         // nothing else: the child of a threaded process
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~CpuHogs() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  CpuHogs(const CpuHogs&) = delete;
  CpuHogs& operator=(const CpuHogs&) = delete;
  int count() const { return int(pids_.size()); }

 private:
  std::vector<pid_t> pids_;
};

// `bx bench msg` and `bx bench rpc` measure rdma's I/O-thread polling policies side by side:
// --polling adaptive|fixed|both and --share-io-threads.
struct RdmaPollingChoice {
  std::string polling = "adaptive";
  bool share_io_threads = false;
};

inline void AddRdmaPollingOptions(CLI::App* command, RdmaPollingChoice* choice) {
  command
      ->add_option("--polling", choice->polling,
                   "rdma I/O threads: adaptive (default), fixed (poll 200 us after work), or both "
                   "(side by side; the fixed rows are rdma-fixed)")
      ->check(CLI::IsMember({"adaptive", "fixed", "both"}));
  command->add_flag("--share-io-threads", choice->share_io_threads,
                    "rdma: the server's and client's transports share the process's I/O threads");
}

// The runs of `scheme` a benchmark makes: (row label, adaptive polling) pairs. "rdma" is the
// adaptive one when both run.
inline std::vector<std::pair<std::string, bool>> PollingRuns(const std::string& scheme,
                                                             const RdmaPollingChoice& choice) {
  if (scheme == "rdma" && choice.polling == "both") return {{"rdma", true}, {"rdma-fixed", false}};
  return {{scheme, choice.polling != "fixed"}};
}

}  // namespace bx::tools
