// The subcommands of `bx`. Each is defined in its own tools/bx/<name>.cc and registered by
// main.cc. A command prints its own output and errors, and reports failure by throwing
// CLI::RuntimeError(exit_code), which main turns into the process exit code.
#pragma once

#include <CLI/CLI.hpp>

namespace bx::tools {

// `bx devices [--json]`: the RDMA devices of the chosen verbs library.
void AddDevicesCommand(CLI::App* app);

// `bx selfcheck [--json]`: SEND/RECV, WRITE, WRITE_WITH_IMM and READ between two devices.
void AddSelfCheckCommand(CLI::App* app);

}  // namespace bx::tools

// `bx bench alloc ...`: registered under the `bench` subcommand. Defined by tools/bx/bench_alloc.cc
// (bemalloc).
void AddBenchAllocCommand(CLI::App* bench);

// `bx bench msg ...`: message latency, throughput and host CPU per transport (bench_msg.cc).
void AddBenchMsgCommand(CLI::App* bench);
void AddBenchVerbsCommand(CLI::App* bench);
