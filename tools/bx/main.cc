// bx: the bexpress command. Subcommands are registered from tools/bx/commands.h.
#include <CLI/CLI.hpp>

#include "bx/log.h"
#include "commands.h"

int main(int argc, char** argv) {
  bx::SetLogSink(bx::StderrLogSink());  // the library's messages, one line each
  CLI::App app{"bx: bexpress, a communication layer over RDMA"};
  app.require_subcommand(1);

  bx::tools::AddDevicesCommand(&app);
  bx::tools::AddSelfCheckCommand(&app);
  bx::tools::AddStatsCommand(&app);
  bx::tools::AddSimCommand(&app);
  bx::tools::AddDemoCommand(&app);
  bx::tools::AddPsCommand(&app);

  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (each prints --json on request)");
  bench->require_subcommand(1);
  bx::tools::AddBenchAllocCommand(bench);
  bx::tools::AddBenchMsgCommand(bench);
  bx::tools::AddBenchVerbsCommand(bench);
  bx::tools::AddBenchScalingCommands(bench);
  bx::tools::AddBenchRpcCommand(bench);
  bx::tools::AddBenchRendezvousCommand(bench);

  CLI11_PARSE(app, argc, argv);
  return 0;
}
