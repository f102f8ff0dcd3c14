// `bx ps handover --cluster FILE --shard S [--to R]`: the shard's primary hands it to a backup
// holding every push (bx/ps/handover.h, docs/PS.md "Planned handover"), for maintenance of the
// primary's host; `bx ps serve` does the same by itself on SIGTERM.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bx/ps/handover.h"
#include "commands.h"
#include "ps_common.h"

namespace bx::tools {
namespace {

struct HandoverFlags {
  std::string cluster;
  uint32_t shard = 0;
  int to = -1;  // -1: the first backup holding every push
  int timeout_ms = 5000;
  bool json = false;
};

void RunHandover(const HandoverFlags& flags) {
  ps::ClusterSpec spec = LoadClusterOrFail(flags.cluster);
  InitPsProcess();
  ps::HandoverOptions options;
  if (flags.to >= 0) options.to = static_cast<uint32_t>(flags.to);
  options.timeout = std::chrono::milliseconds(flags.timeout_ms);
  const auto start = std::chrono::steady_clock::now();
  Result<ps::HandoverResult> done = ps::HandOverShard(spec, flags.shard, options);
  if (!done.ok()) FailPs("handover of shard " + std::to_string(flags.shard), done.status());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (flags.json) {
    std::printf("%s\n", nlohmann::json{{"shard", flags.shard},
                                       {"successor", done->successor},
                                       {"epoch", done->epoch},
                                       {"lsn", done->lsn},
                                       {"ms", ms}}
                            .dump()
                            .c_str());
  } else {
    std::printf(
        "shard %u handed over to replica %u at lsn %llu of epoch %llu in %.1f ms; it promotes "
        "itself to epoch %llu\n",
        flags.shard, done->successor, static_cast<unsigned long long>(done->lsn),
        static_cast<unsigned long long>(done->epoch), ms,
        static_cast<unsigned long long>(done->epoch + 1));
  }
  std::fflush(stdout);
}

}  // namespace

void AddPsHandoverCommand(CLI::App* ps) {
  auto flags = std::make_shared<HandoverFlags>();
  CLI::App* c = ps->add_subcommand(
      "handover", "Hand a shard from its primary to a backup that holds every push");
  c->footer(
      "The primary stops taking pushes (trainers retry at the successor), waits until its "
      "pushes are on its backups, names the successor in the configuration store and gives up "
      "its lease; the successor promotes itself at once and the old primary rejoins as a "
      "backup. Needs failover with a configuration store (--etcd). `bx ps serve` hands over "
      "by itself on SIGTERM.");
  c->add_option("--cluster", flags->cluster, "Cluster file (JSON)")->required();
  c->add_option("--shard", flags->shard, "The shard to hand over")->required();
  c->add_option("--to", flags->to,
                "The backup replica to hand it to (default: the first "
                "that holds every push)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--timeout-ms", flags->timeout_ms,
                "How long the primary may take to make its pushes durable and name the successor")
      ->check(CLI::PositiveNumber);
  c->add_flag("--json", flags->json, "Print JSON");
  c->callback([flags] { RunHandover(*flags); });
}

}  // namespace bx::tools
