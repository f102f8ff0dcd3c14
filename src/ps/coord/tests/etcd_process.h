// EtcdProcess: a real single-member etcd (/usr/bin/etcd, Debian's etcd-server) for tests, run in
// a fresh temporary directory on free ports below the ephemeral range (so no client socket of a
// concurrent test can hold them), killed and removed on destruction.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "bx/status.h"

namespace bx::ps::coord_test {

class EtcdProcess {
 public:
  static constexpr const char* kBinary = "/usr/bin/etcd";

  // Starts etcd and waits (up to 30 s) until it answers /health. FailedPrecondition when the
  // binary is missing: it is an installed dependency (tools/install-deps.sh), not optional.
  static Result<std::unique_ptr<EtcdProcess>> Start();
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  const std::string& endpoint() const { return endpoint_; }  // "http://127.0.0.1:port"
  const std::string& log_path() const { return log_path_; }

  // SIGSTOP / SIGCONT, returning once the process has stopped / continued. While paused, the
  // kernel still accepts connections but nothing answers: calls run into their timeout.
  Status Pause();
  Status Resume();

 private:
  EtcdProcess() = default;
  Status Spawn(int client_port, int peer_port, int attempt);
  Status WaitUntilHealthy(int client_port);
  std::string LogTail() const;

  pid_t pid_ = -1;
  std::string dir_;
  std::string log_path_;
  std::string endpoint_;
};

// A port of [20000, start of the ephemeral range) that nothing on 127.0.0.1 holds right now.
Result<int> PickFreePort();

}  // namespace bx::ps::coord_test
