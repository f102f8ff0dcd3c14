// `bx ps checkpoint --cluster FILE --to DIR`: the whole model, every shard at one position of
// its push stream, while training goes on; `bx ps export --from DIR --table NAME --to F.npz`:
// one table of a checkpoint as NumPy arrays. `bx ps serve --restore DIR` (ps_command.cc) starts
// a cluster from a checkpoint. docs/PS.md "Checkpoints".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bx/ps/checkpoint.h"
#include "commands.h"
#include "ps_common.h"

namespace bx::tools {
namespace {

struct CheckpointFlags {
  std::string cluster, dir;
  int shard_timeout_ms = 120'000;
  double every_seconds = 0;  // 0: one checkpoint into dir itself
  int keep = 3;
  bool json = false;
};

// "20261207-031502.123": checkpoints of one --every run sort by name as by time.
std::string TimestampName() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char name[32];
  std::strftime(name, sizeof name, "%Y%m%d-%H%M%S", &utc);
  return std::string(name) + "." + std::to_string(1000 + ms).substr(1);
}

// Keeps the newest `keep` complete checkpoints under `parent` (whose manifest reads back, its
// files present) and removes the others, and every unfinished one older than the newest
// complete one (left by a crash mid-write).
void Prune(const std::string& parent, int keep) {
  std::vector<std::string> complete, unfinished;
  for (const auto& entry : std::filesystem::directory_iterator(parent)) {
    if (!entry.is_directory()) continue;
    const bool done = ps::ReadCheckpointManifest(entry.path().string()).ok();
    (done ? complete : unfinished).push_back(entry.path().string());
  }
  std::sort(complete.begin(), complete.end());
  std::error_code ignored;
  for (size_t i = 0; i + size_t(keep) < complete.size(); ++i) {
    std::filesystem::remove_all(complete[i], ignored);
  }
  for (const std::string& dir : unfinished) {
    if (!complete.empty() && dir < complete.back()) std::filesystem::remove_all(dir, ignored);
  }
}

// One checkpoint of `spec` into `dir`, its summary printed; false (the error printed) when it
// failed.
bool WriteOne(const ps::ClusterSpec& spec, const CheckpointFlags& flags, const std::string& dir) {
  ps::CheckpointOptions options;
  options.shard_timeout = std::chrono::milliseconds(flags.shard_timeout_ms);
  options.client.log = [](std::string_view) {};
  const auto start = std::chrono::steady_clock::now();
  Result<ps::CheckpointManifest> manifest = ps::WriteCheckpoint(spec, dir, options);
  if (!manifest.ok()) {
    std::fprintf(stderr, "bx ps: checkpoint into %s: %s\n", dir.c_str(),
                 manifest.status().ToString().c_str());
    return false;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t bytes = 0;
  for (const ps::CheckpointShard& s : manifest->shards) bytes += s.bytes;
  const double mib = double(bytes) / double(1 << 20);
  if (flags.json) {
    nlohmann::json out;
    out["dir"] = dir;
    out["seconds"] = seconds;
    out["bytes"] = bytes;
    out["mib_per_second"] = seconds > 0 ? mib / seconds : 0.0;
    for (const ps::CheckpointShard& s : manifest->shards) {
      out["shards"].push_back(
          {{"shard", s.shard}, {"epoch", s.epoch}, {"lsn", s.lsn}, {"bytes", s.bytes}});
    }
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
    return true;
  }
  std::printf("%-6s %8s %12s %14s\n", "shard", "epoch", "lsn", "bytes");
  for (const ps::CheckpointShard& s : manifest->shards) {
    std::printf("%-6u %8llu %12llu %14llu\n", s.shard, (unsigned long long)s.epoch,
                (unsigned long long)s.lsn, (unsigned long long)s.bytes);
  }
  std::printf("checkpoint of %zu shards in %s: %.1f MiB in %.2f s (%.1f MiB/s)\n",
              manifest->shards.size(), dir.c_str(), mib, seconds,
              seconds > 0 ? mib / seconds : 0.0);
  std::fflush(stdout);
  return true;
}

void RunCheckpoint(const CheckpointFlags& flags) {
  ps::ClusterSpec spec = LoadClusterOrFail(flags.cluster);
  InitPsProcess();
  if (!WriteOne(spec, flags, flags.dir)) throw CLI::RuntimeError(1);
}

// --every: a checkpoint into a new timestamped directory under flags.dir every period, the
// newest --keep kept, until SIGINT or SIGTERM.
void RunPeriodicCheckpoints(const CheckpointFlags& flags) {
  StopOnSigintOrSigterm();  // the checkpoint being written is finished first
  const auto period = std::chrono::duration<double>(flags.every_seconds);
  auto next = std::chrono::steady_clock::now();
  ps::ClusterSpec spec = LoadClusterOrFail(flags.cluster);
  InitPsProcess();
  while (!PsStopRequested()) {
    // A failed one (a failover under way) is reported and the next one tried on time.
    if (WriteOne(spec, flags, flags.dir + "/" + TimestampName())) Prune(flags.dir, flags.keep);
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
    while (!PsStopRequested() && std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

struct ExportFlags {
  std::string dir, table, out;
  bool optimizer_state = false;
};

void RunExport(const ExportFlags& flags) {
  ps::ExportOptions options;
  options.optimizer_state = flags.optimizer_state;
  Result<uint64_t> rows = ps::ExportCheckpointTable(flags.dir, flags.table, flags.out, options);
  if (!rows.ok()) FailPs("export", rows.status());
  std::printf("%llu rows of table %s written to %s\n", (unsigned long long)*rows,
              flags.table.c_str(), flags.out.c_str());
}

}  // namespace

void AddPsCheckpointCommands(CLI::App* ps) {
  auto checkpoint = std::make_shared<CheckpointFlags>();
  CLI::App* c = ps->add_subcommand(
      "checkpoint", "Write every shard's rows, at a durable position, to a directory");
  c->footer(
      "Each shard's primary copies its state (pushes wait only for the copy), waits until every "
      "push up to that position is on min_in_sync replicas, and streams it here; manifest.json "
      "is written last, so a directory without one is no checkpoint. Pushes go on throughout. "
      "Start a cluster from it with `bx ps serve --restore DIR` (any shard count).");
  c->add_option("--cluster", checkpoint->cluster, "Cluster file (JSON)")->required();
  c->add_option("--to", checkpoint->dir, "Directory to write (must not hold a checkpoint)")
      ->required();
  c->add_option("--shard-timeout-ms", checkpoint->shard_timeout_ms,
                "How long one shard may take (copy, durable wait, transfer)")
      ->check(CLI::PositiveNumber);
  c->add_option("--every", checkpoint->every_seconds,
                "Seconds between checkpoints, each into a new timestamped directory under --to, "
                "until SIGINT/SIGTERM (0: one checkpoint into --to itself)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--keep", checkpoint->keep,
                "With --every: complete checkpoints kept (older ones, and unfinished ones older "
                "than the newest, are removed)")
      ->check(CLI::PositiveNumber);
  c->add_flag("--json", checkpoint->json, "Print JSON (one line per checkpoint)");
  c->callback([checkpoint] {
    if (checkpoint->every_seconds > 0) return RunPeriodicCheckpoints(*checkpoint);
    RunCheckpoint(*checkpoint);
  });

  auto exported = std::make_shared<ExportFlags>();
  CLI::App* e = ps->add_subcommand("export", "Write one table of a checkpoint as a NumPy .npz");
  e->footer(
      "The .npz holds \"keys\" (uint64, n) and \"rows\" (float32, n x dim), row i for key i, in "
      "no particular order; with --optimizer-state also \"state\" (the optimiser's per-row "
      "floats). numpy.load reads it.");
  e->add_option("--from", exported->dir, "Checkpoint directory")->required();
  e->add_option("--table", exported->table, "Table name (as in the cluster file)")->required();
  e->add_option("--to", exported->out, "The .npz to write")->required();
  e->add_flag("--optimizer-state", exported->optimizer_state, "Also the optimiser's per-row state");
  e->callback([exported] { RunExport(*exported); });
}

}  // namespace bx::tools
