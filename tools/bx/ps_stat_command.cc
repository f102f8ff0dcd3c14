// `bx ps stat --cluster FILE`: every replica's role, position, backups, fetch and push rates,
// and each table's rows and bytes, asked over the network ("ps.Stat", bx/ps/stats.h).
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "bx/ps/stats.h"
#include "commands.h"
#include "ps_common.h"

namespace bx::tools {
namespace {

struct StatFlags {
  std::string cluster;
  double interval_seconds = 1.0;
  bool json = false;
  bool digest = false;
};

void RunStat(const StatFlags& flags) {
  ps::ClusterSpec spec = LoadClusterOrFail(flags.cluster);
  InitPsProcess();
  const auto timeout = std::chrono::seconds(3);
  std::vector<ps::ReplicaStats> first = ps::QueryClusterStats(spec, timeout, {}, flags.digest);
  std::vector<ps::ReplicaStats> last = first;
  if (flags.interval_seconds > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.interval_seconds));
    last = ps::QueryClusterStats(spec, timeout, {}, flags.digest);
  }
  auto rate = [&](size_t i, uint64_t ps::PsServerCounters::*counter) {
    if (flags.interval_seconds <= 0 || !first[i].status.ok() || !last[i].status.ok()) return 0.0;
    return double(last[i].counters.*counter - first[i].counters.*counter) / flags.interval_seconds;
  };
  bool all_answered = true;
  nlohmann::json out = nlohmann::json::array();
  // Per table, over the shards' primaries: the cluster's rows, bytes and evictions.
  struct Total {
    uint64_t rows = 0, bytes = 0, evicted = 0, expired = 0, admitted = 0, admission_rejected = 0;
  };
  std::map<std::string, Total> totals;
  if (!flags.json) {
    std::printf("%-6s%-8s%-9s%7s%12s%8s%10s%10s%12s%10s%10s\n", "shard", "replica", "role", "epoch",
                "lsn", "backups", "fetch/s", "push/s", "rows", "MiB", "ckpt age");
  }
  for (size_t i = 0; i < last.size(); ++i) {
    const ps::ReplicaStats& r = last[i];
    if (!r.status.ok()) {
      all_answered = false;
      if (flags.json) {
        out.push_back({{"shard", r.shard},
                       {"replica", r.replica},
                       {"address", r.address},
                       {"error", r.status.ToString()}});
      } else {
        std::printf("%-6u%-8u%s: %s\n", r.shard, r.replica, r.address.c_str(),
                    r.status.ToString().c_str());
      }
      continue;
    }
    uint64_t rows = 0, bytes = 0;
    nlohmann::json tables = nlohmann::json::array();
    for (const ps::PsTableStats& t : r.tables) {
      rows += t.rows;
      bytes += t.bytes;
      nlohmann::json table = {
          {"id", t.id},       {"name", t.name},           {"rows", t.rows},
          {"bytes", t.bytes}, {"row_limit", t.row_limit}, {"evicted", t.evicted}};
      table["expired"] = t.expired;
      table["admitted"] = t.admitted;
      table["admission_rejected"] = t.admission_rejected;
      if (flags.digest) table["digest"] = t.digest;
      tables.push_back(std::move(table));
      if (r.role == "primary") {
        totals[t.name].rows += t.rows;
        totals[t.name].bytes += t.bytes;
        totals[t.name].evicted += t.evicted;
        totals[t.name].expired += t.expired;
        totals[t.name].admitted += t.admitted;
        totals[t.name].admission_rejected += t.admission_rejected;
      }
    }
    const double fetches = rate(i, &ps::PsServerCounters::fetches);
    const double pushes =
        rate(i, &ps::PsServerCounters::pushes_acked) + rate(i, &ps::PsServerCounters::forwards);
    if (flags.json) {
      out.push_back({{"shard", r.shard},
                     {"replica", r.replica},
                     {"address", r.address},
                     {"role", r.role},
                     {"epoch", r.epoch},
                     {"lsn", r.lsn},
                     {"live_backups", r.live_backups},
                     {"fetches_per_second", fetches},
                     {"pushes_per_second", pushes},
                     {"checkpoints", r.counters.checkpoints},
                     {"last_checkpoint",
                      {{"unix_ms", r.last_checkpoint_unix_ms},
                       {"epoch", r.last_checkpoint_epoch},
                       {"lsn", r.last_checkpoint_lsn}}},
                     {"dedup_clients", r.counters.dedup_clients},
                     {"tables", tables}});
      if (r.follower) {
        out.back()["sync"] = {{"epoch", r.synced_epoch},
                              {"lsn", r.synced_lsn},
                              {"lag_ms", r.sync_lag_ms},
                              {"applied", r.syncs_applied},
                              {"full_copies", r.sync_full_copies}};
      }
    } else {
      // Seconds since this replica last served a checkpoint as primary ("-": never).
      std::string age = "-";
      if (r.last_checkpoint_unix_ms != 0) {
        const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
        age = std::to_string((now_ms - int64_t(r.last_checkpoint_unix_ms)) / 1000) + " s";
      }
      std::printf("%-6u%-8u%-9s%7llu%12llu%8llu%10.0f%10.0f%12llu%10.1f%10s\n", r.shard, r.replica,
                  r.role.c_str(), (unsigned long long)r.epoch, (unsigned long long)r.lsn,
                  (unsigned long long)r.live_backups, fetches, pushes, (unsigned long long)rows,
                  double(bytes) / double(1 << 20), age.c_str());
      if (r.follower) {
        // A serving replica: the training position it holds and how old that is.
        std::printf("      sync: training epoch %llu lsn %llu, lag %s, %llu syncs (%llu full)\n",
                    (unsigned long long)r.synced_epoch, (unsigned long long)r.synced_lsn,
                    r.synced_asked_unix_ms == 0
                        ? "- (never synced)"
                        : (std::to_string(r.sync_lag_ms / 1000.0).substr(0, 5) + " s").c_str(),
                    (unsigned long long)r.syncs_applied, (unsigned long long)r.sync_full_copies);
      }
    }
  }
  if (flags.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    for (const auto& [name, total] : totals) {
      std::printf("table %s: %llu rows, %.1f MiB on the primaries", name.c_str(),
                  (unsigned long long)total.rows, double(total.bytes) / double(1 << 20));
      if (total.evicted != 0) std::printf(", %llu evicted", (unsigned long long)total.evicted);
      if (total.expired != 0) std::printf(", %llu expired", (unsigned long long)total.expired);
      if (total.admitted != 0 || total.admission_rejected != 0) {
        std::printf(", %llu admitted (%llu pushes of ids not yet admitted)",
                    (unsigned long long)total.admitted,
                    (unsigned long long)total.admission_rejected);
      }
      std::printf("\n");
    }
  }
  std::fflush(stdout);
  if (!all_answered) throw CLI::RuntimeError(1);
}

}  // namespace

void AddPsStatCommand(CLI::App* ps) {
  auto flags = std::make_shared<StatFlags>();
  CLI::App* c = ps->add_subcommand(
      "stat", "Every replica's role, position, rates, and its tables' rows and bytes");
  c->footer(
      "Pushes/s counts pushes acknowledged by a primary and pushes forwarded to a backup. Rows "
      "and MiB are the replica's (keys, weights and optimiser state); the per-table lines sum "
      "the primaries. Exits 1 when a replica did not answer (it is listed with the reason).");
  c->add_option("--cluster", flags->cluster, "Cluster file (JSON)")->required();
  c->add_option("--interval", flags->interval_seconds,
                "Seconds between the two samples the rates come from (0: no rates)")
      ->check(CLI::NonNegativeNumber);
  c->add_flag("--json", flags->json, "Print JSON");
  c->add_flag("--digest", flags->digest,
              "With --json: each replica also hashes every table's rows (a full scan); replicas "
              "at one lsn hold the same rows when their digests agree");
  c->callback([flags] { RunStat(*flags); });
}

}  // namespace bx::tools
