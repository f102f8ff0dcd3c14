// `bx bench alloc`: the allocator benchmark of paper Figure 4 and the footprint of Figure 5.
//
// Every allocator runs in its own worker process (tools/alloc_workers/, installed next to bx),
// one process per configuration, so that no allocator replaces another's malloc and peak memory
// is that configuration's alone. Each configuration runs --repeat times and the best rate is
// kept: on a shared machine other load only ever slows a run down.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "bx/status.h"
#include "commands.h"

extern char** environ;

namespace bx::tools {
namespace {

using nlohmann::json;

struct BenchAllocOptions {
  bool json = false;
  bool footprint = false;
  bool quick = false;
  double seconds = 0.4;
  int repeat = 2;
  std::vector<int> threads = {1, 2, 4, 8};
  std::vector<std::string> sizes = {"small", "large"};
  // mixed: one free in ten on another thread; producer-consumer: every one (workload.h).
  std::vector<std::string> patterns = {"mixed", "producer-consumer"};
  std::vector<std::string> allocators = {"glibc", "jemalloc", "tcmalloc", "mimalloc", "bemalloc"};
  double footprint_seconds = 4;
  int interval_ms = 100;
};

std::string WorkerPath(const std::string& allocator) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / ("bx_alloc_worker_" + allocator)).string();
}

// Runs `path args...` and returns what it printed on stdout.
Result<std::string> RunWorker(const std::string& path, const std::vector<std::string>& args) {
  if (access(path.c_str(), X_OK) != 0) return NotFound(path + " is not built");
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe2");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  std::vector<std::string> storage = {path};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int err = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (err != 0) {
    close(out[0]);
    return Status::FromErrno(err, "posix_spawn " + path);
  }
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = read(out[0], buffer, sizeof(buffer))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output.append(buffer, n);
  }
  close(out[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return Internal(path + " failed (status " + std::to_string(wstatus) + ")");
  }
  return output;
}

struct Configuration {
  std::string pattern, sizes;
  int threads = 1;
};

Result<json> RunConfiguration(const BenchAllocOptions& o, const std::string& allocator,
                              const Configuration& c) {
  json best;
  for (int run = 0; run < o.repeat; ++run) {
    BX_ASSIGN_OR_RETURN(std::string out, RunWorker(WorkerPath(allocator),
                                                   {"--pattern", c.pattern, "--sizes", c.sizes,
                                                    "--threads", std::to_string(c.threads),
                                                    "--seconds", fmt::format("{}", o.seconds)}));
    json result = json::parse(out, nullptr, /*allow_exceptions=*/false);
    if (result.is_discarded()) return DataLoss(allocator + " worker printed: " + out);
    if (best.is_null() || result["ops_per_sec"].get<double>() > best["ops_per_sec"].get<double>()) {
      best = result;
    }
  }
  return best;
}

const json* Find(const json& results, const std::string& allocator, const Configuration& c) {
  for (const json& r : results) {
    if (r["allocator"] == allocator && r["pattern"] == c.pattern && r["sizes"] == c.sizes &&
        r["threads"] == c.threads) {
      return &r;
    }
  }
  return nullptr;
}

// Every configuration asked for; producer/consumer needs an even thread count (pairs).
std::vector<Configuration> Configurations(const BenchAllocOptions& o) {
  std::vector<Configuration> all;
  for (const std::string& pattern : o.patterns) {
    for (const std::string& sizes : o.sizes) {
      for (int threads : o.threads) {
        if (pattern == "producer-consumer" && threads % 2 != 0) continue;
        all.push_back({pattern, sizes, threads});
      }
    }
  }
  return all;
}

double MiB(const json& v, const char* field) {
  return v[field].get<double>() / (1 << 20);
}

// Growth from the middle of a run to its end, as a ratio (1: flat).
double Growth(const json& v, const char* mid, const char* end) {
  return v[end].get<double>() / std::max(1.0, v[mid].get<double>());
}

int RunThroughput(const BenchAllocOptions& o) {
  json results = json::array();
  const std::vector<Configuration> configurations = Configurations(o);
  if (!o.json) {
    fmt::print("{:<17} {:<6} {:>7}  {:<9} {:>8} {:>9} {:>22} {:>24}\n", "pattern", "sizes",
               "threads", "allocator", "Mops/s", "peak MiB", "resident mid->end MiB",
               "registered mid->end MiB");
  }
  for (const Configuration& c : configurations) {
    for (const std::string& allocator : o.allocators) {
      Result<json> r = RunConfiguration(o, allocator, c);
      if (!r.ok()) {
        fmt::print(stderr, "bx bench alloc: {} skipped: {}\n", allocator, r.status().ToString());
        continue;
      }
      const json& v = r.value();
      results.push_back(v);
      if (o.json) continue;
      fmt::print("{:<17} {:<6} {:>7}  {:<9} {:>8.2f} {:>9.1f} {:>22} {:>24}\n", c.pattern, c.sizes,
                 c.threads, allocator, v["ops_per_sec"].get<double>() / 1e6, MiB(v, "peak_bytes"),
                 fmt::format("{:.1f} -> {:.1f}", MiB(v, "resident_mid_bytes"),
                             MiB(v, "resident_end_bytes")),
                 v.contains("registered_mid_bytes")
                     ? fmt::format("{:.1f} -> {:.1f}", MiB(v, "registered_mid_bytes"),
                                   MiB(v, "registered_end_bytes"))
                     : "");
    }
  }
  json ratios = json::array();
  for (const Configuration& c : configurations) {
    const json* be = Find(results, "bemalloc", c);
    const json* je = Find(results, "jemalloc", c);
    if (be == nullptr) continue;
    json row = {{"pattern", c.pattern},
                {"sizes", c.sizes},
                {"threads", c.threads},
                {"registered_growth", Growth(*be, "registered_mid_bytes", "registered_end_bytes")}};
    if (je != nullptr) {
      row.update(
          {{"ops_ratio", (*be)["ops_per_sec"].get<double>() / (*je)["ops_per_sec"].get<double>()},
           {"peak_ratio",
            (*be)["peak_bytes"].get<double>() / std::max(1.0, (*je)["peak_bytes"].get<double>())}});
    }
    ratios.push_back(std::move(row));
  }
  if (o.json) {
    json out = {{"results", results},
                {"bemalloc_vs_jemalloc", ratios},
                {"seconds_per_run", o.seconds},
                {"repeat", o.repeat}};
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print(
        "\nbemalloc / jemalloc (best of {} runs of {} s each); bemalloc's registered bytes, end "
        "of the run / middle\n",
        o.repeat, o.seconds);
    for (const json& r : ratios) {
      fmt::print(
          "{:<17} {:<6} {:>2} threads  ops {}  peak memory {}  registered growth {:.2f}x\n",
          r["pattern"].get<std::string>(), r["sizes"].get<std::string>(), r["threads"].get<int>(),
          r.contains("ops_ratio") ? fmt::format("{:.2f}x", r["ops_ratio"].get<double>()) : "-",
          r.contains("peak_ratio") ? fmt::format("{:.2f}x", r["peak_ratio"].get<double>()) : "-",
          r["registered_growth"].get<double>());
    }
  }
  return 0;
}

int RunFootprint(const BenchAllocOptions& o) {
  Result<std::string> out = RunWorker(
      WorkerPath("bemalloc"), {"--footprint", "--seconds", fmt::format("{}", o.footprint_seconds),
                               "--interval-ms", std::to_string(o.interval_ms)});
  if (!out.ok()) {
    fmt::print(stderr, "bx bench alloc --footprint: {}\n", out.status().ToString());
    return 1;
  }
  json result = json::parse(out.value(), nullptr, /*allow_exceptions=*/false);
  if (result.is_discarded()) {
    fmt::print(stderr, "bx bench alloc --footprint: worker printed: {}\n", out.value());
    return 1;
  }
  if (o.json) {
    fmt::print("{}\n", result.dump(2));
    return 0;
  }
  fmt::print("{:>7} {:>15} {:>8} {:>14} {:>16} {:>10}\n", "t_ms", "registered_MiB", "regions",
             "registrations", "deregistrations", "live_MiB");
  for (const json& s : result["samples"]) {
    fmt::print("{:>7} {:>15.1f} {:>8} {:>14} {:>16} {:>10.1f}\n", s["t_ms"].get<long>(),
               s["registered_bytes"].get<double>() / (1 << 20), s["regions"].get<uint64_t>(),
               s["registrations"].get<uint64_t>(), s["deregistrations"].get<uint64_t>(),
               s["live_bytes"].get<double>() / (1 << 20));
  }
  fmt::print("plateau from {} ms: {} registrations\n", result["plateau_start_ms"].get<long>(),
             result["registrations_during_plateau"].get<uint64_t>());
  return 0;
}

}  // namespace

void AddBenchAllocCommand(CLI::App* bench) {
  auto options = std::make_shared<BenchAllocOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "alloc",
      "Allocator benchmark (paper Fig. 4: glibc, jemalloc, tcmalloc, mimalloc, bemalloc) "
      "or, with --footprint, bemalloc's registered footprint over time (Fig. 5)");
  cmd->add_flag("--json", options->json, "Print JSON");
  cmd->add_flag("--footprint", options->footprint, "Sample registered bytes over time instead");
  cmd->add_flag("--quick", options->quick, "Short run: 1 and 2 threads, 0.2 s, no repeat");
  cmd->add_option("--seconds", options->seconds, "Seconds per run")->check(CLI::PositiveNumber);
  cmd->add_option("--repeat", options->repeat, "Runs per configuration; the best is kept")
      ->check(CLI::Range(1, 20));
  cmd->add_option("--threads", options->threads, "Thread counts")->delimiter(',');
  cmd->add_option("--sizes", options->sizes, "Size classes: small, large")
      ->delimiter(',')
      ->check(CLI::IsMember({"small", "large"}));
  cmd->add_option("--patterns", options->patterns,
                  "mixed (one free in ten on another thread), producer-consumer (every free; "
                  "even thread counts)")
      ->delimiter(',')
      ->check(CLI::IsMember({"mixed", "producer-consumer"}));
  cmd->add_option("--allocators", options->allocators, "Allocators to run")
      ->delimiter(',')
      ->check(CLI::IsMember({"glibc", "jemalloc", "tcmalloc", "mimalloc", "bemalloc"}));
  cmd->add_option("--footprint-seconds", options->footprint_seconds, "Footprint run length")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--interval-ms", options->interval_ms, "Footprint sampling interval")
      ->check(CLI::PositiveNumber);
  cmd->callback([options, cmd] {
    BenchAllocOptions o = *options;
    if (o.quick) {
      if (cmd->count("--threads") == 0) o.threads = {1, 2};
      if (cmd->count("--seconds") == 0) o.seconds = 0.2;
      if (cmd->count("--repeat") == 0) o.repeat = 1;
      if (cmd->count("--footprint-seconds") == 0) o.footprint_seconds = 2;
    }
    int code = o.footprint ? RunFootprint(o) : RunThroughput(o);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace bx::tools
