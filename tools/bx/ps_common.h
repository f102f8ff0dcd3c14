// What the `bx ps` commands share (ps_command.cc): reading the cluster file, starting the
// library, failing with one line, and stopping on a signal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bx/ps/client.h"
#include "bx/ps/cluster.h"
#include "bx/status.h"
#include "bx/transport.h"

namespace bx::tools {

// Prints "bx ps: <what>: <status>" and exits the command with status 1.
[[noreturn]] void FailPs(const std::string& what, const Status& status);
// The cluster file at `path` (FailPs when it cannot be read); its "rdma" settings become this
// process's BX_GID_INDEX, BX_TRAFFIC_CLASS and BX_SERVICE_LEVEL unless the host set them.
ps::ClusterSpec LoadClusterOrFail(const std::string& path);
// bx::Init on the simnic unless BX_VERBS says otherwise (FailPs on error).
void InitPsProcess();
// From now on SIGINT and SIGTERM ask the command to stop (PsStopRequested) instead of ending
// the process: a server stops serving, a trainer ends its run, a checkpoint being written is
// finished first.
void StopOnSigintOrSigterm();
bool PsStopRequested();

// A PsClient of `spec` on one shared transport (CreateSharedClientTransport, ps_reach.h), made once
// every shard answers (CheckShardsReachable, 3 s); FailPs naming `command` otherwise. The client
// goes first.
struct ConnectedPsClient {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<ps::PsClient> client;
};
ConnectedPsClient ConnectPsClientOrFail(const ps::ClusterSpec& spec, const std::string& command);

// `bx ps train --stream-keys` (ps_stream.cc): keys key_base .. key_base+keys-1, each pushed once
// to the cluster file's first table, `batch` to a push, over `threads` threads; prints a JSON
// line (keys, pushes, seconds, keys per second). False when a push failed.
struct StreamKeysFlags {
  uint64_t keys = 0;
  uint64_t key_base = 0;
  uint64_t batch = 1024;
  int push_timeout_ms = 10000;
};
bool RunStreamKeys(const ps::ClusterSpec& spec, int threads, const StreamKeysFlags& flags);

}  // namespace bx::tools
