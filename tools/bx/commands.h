// The subcommands of `bx`. Each is defined in its own tools/bx/<name>.cc and registered by
// main.cc. A command prints its own output and errors, and reports failure by throwing
// CLI::RuntimeError(exit_code), which main turns into the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>

#include "bx/status.h"

namespace bx::tools {

// `bx devices [--json]`: the RDMA devices of the chosen verbs library.
void AddDevicesCommand(CLI::App* app);

// `bx selfcheck [--json]`: SEND/RECV, WRITE, WRITE_WITH_IMM and READ between two devices.
void AddSelfCheckCommand(CLI::App* app);

// `bx stats --url http://host:port/metrics [--filter S] [--json]`: a running process's metrics.
void AddStatsCommand(CLI::App* app);

// `bx sim incast ...`: the fabric simulation (sim_command.cc, src/sim/).
void AddSimCommand(CLI::App* app);
// `bx sim validate`, under `bx sim` (sim_validate_command.cc).
void AddSimValidateCommand(CLI::App* simulate);
// `bx sim sensitivity`, under `bx sim` (sim_sensitivity_command.cc).
void AddSimSensitivityCommand(CLI::App* simulate);
// The simulator's partitions by default: one per core (a `bx sim` run is the machine's only work).
uint32_t DefaultSimThreads();
// Adds --tcp-acks first|with-data (sim::FabricConfig::tcp_acks_with_data) to a `bx sim`
// command, its default the command's own (*with_data as given).
void AddTcpAcksOption(CLI::App* command, bool* with_data);
// Adds --threads (sim::SimConfig::threads) to a `bx sim` command.
void AddSimThreadsOption(CLI::App* command, uint32_t* threads);
// `bx sim dcqcn-fluid`: DCQCN against its fluid model (sim_dcqcn_fluid_command.cc).
void AddSimDcqcnFluidCommand(CLI::App* simulate);
// Host CPU per message of the tcp transport, both ends together, as `bx bench msg` measures it
// (bench_msg.cc): what `bx sim sensitivity` takes the simulated TCP stack's cost from.
Result<double> MeasureTcpHostCpuNsPerMessage(size_t size, int messages);

// `bx demo`: an in-process parameter-server cluster, RDMA vs TCP (demo_command.cc).
void AddDemoCommand(CLI::App* app);
// `bx ps serve|rank|train --cluster FILE`: the PS roles as processes (ps_command.cc).
void AddPsCommand(CLI::App* app);
// `bx ps checkpoint` and `bx ps export`, under `bx ps` (ps_checkpoint_command.cc).
void AddPsCheckpointCommands(CLI::App* ps);
// `bx ps stat`, under `bx ps` (ps_stat_command.cc).
void AddPsStatCommand(CLI::App* ps);
// `bx ps handover`, under `bx ps` (ps_handover_command.cc).
void AddPsHandoverCommand(CLI::App* ps);

// `bx bench alloc ...`: registered under the `bench` subcommand. Defined by tools/bx/bench_alloc.cc
// (bemalloc).
void AddBenchAllocCommand(CLI::App* bench);

// `bx bench msg ...`: message latency, throughput and host CPU per transport (bench_msg.cc).
void AddBenchMsgCommand(CLI::App* bench);
void AddBenchVerbsCommand(CLI::App* bench);

// `bx bench fanout` and `bx bench incast`: QP multiplexing and the send window (bench_scaling.cc).
void AddBenchScalingCommands(CLI::App* bench);
// `bx bench rpc ...`: RPC calls/s and latency beside gRPC (bench_rpc.cc).
void AddBenchRpcCommand(CLI::App* bench);
// `bx bench rendezvous`: cost per rendezvous with and without scoped remote writes.
void AddBenchRendezvousCommand(CLI::App* bench);

}  // namespace bx::tools
