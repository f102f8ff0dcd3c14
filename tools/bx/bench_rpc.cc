// `bx bench rpc`: bexpress RPC calls per second and p50/p99 latency for 64 B and 16 KB echo
// requests with 1 and 64 calls outstanding, per transport, side by side in the same run with
// gRPC C++ unary echo (tools/grpc_echo, built on first use by its build.sh into the build tree).
//
// Both sides are closed loops: the client keeps `outstanding` calls in flight and starts the next
// one in the completion callback. bexpress runs its server in this process (inline dispatch: the
// echo handler sends the request buffer back, no copy) with a client over rdma:// or tcp://;
// gRPC runs its server and client as two processes (synchronous server, completion-queue client).
// Latency is measured per call by the client, from Call() to its callback.
//
// With --rate R the bexpress rows are an open loop instead: calls start on a fixed schedule of R
// per second whatever the replies do, latency counts from each call's scheduled start (so a
// stall is not hidden by the schedule waiting for it), and the table adds the host CPU per call:
// the process's CPU (client and server both run here) minus the simnic's hardware threads,
// over the measured calls. At one offered load for both transports, busy polling cannot hide
// in throughput.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "build_tree.h"
#include "bx/init.h"
#include "bx/rpc.h"
#include "commands.h"

namespace bx::tools {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct BenchRpcOptions {
  std::string transport = "all";
  bool json = false;
  int calls = 0;  // per configuration; 0: 20000 for 64 B, 10000 for 16 KB
  bool grpc = true;
  double rate = 0;               // > 0: open loop at this many calls per second (bexpress only)
  int cpu_hogs = 0;              // processes spinning on the CPU while the benchmark runs
  RdmaPollingChoice rdma;        // --polling, --share-io-threads
  bool adaptive_polling = true;  // this run's rdma polling (from rdma.polling)
};

struct Row {
  std::string system;  // "bx-rpc" or "grpc"
  std::string transport;
  size_t size = 0;
  int outstanding = 0;
  double calls_per_sec = 0;
  double p50_us = 0;
  double p99_us = 0;
  uint64_t errors = 0;
  std::string note;
  double offered_rate = 0;          // open loop only
  double host_cpu_us_per_call = 0;  // open loop only
};

const size_t kSizes[] = {64, 16384};
const int kOutstanding[] = {1, 64};

// "64B", "16KB": a request size as the tables show it.
std::string SizeLabel(size_t size) {
  return size >= 1024 ? fmt::format("{}KB", size / 1024) : fmt::format("{}B", size);
}

int CallsFor(const BenchRpcOptions& options, size_t size) {
  if (options.calls > 0) return options.calls;
  if (options.rate > 0) return std::max(1000, int(options.rate * 2));  // about 2 s
  return size <= 64 ? 20000 : 10000;
}

// One closed loop of `calls` echo calls (after a tenth as many warm-up calls).
Result<Row> RunBxLoop(rpc::Client& client, size_t size, int outstanding, int calls) {
  const int warmup = std::max(100, calls / 10);
  const int total = warmup + calls;
  struct Loop {
    std::mutex mutex;
    std::condition_variable finished;
    int started = 0;
    int done = 0;
    uint64_t errors = 0;
    rpc::LatencyHistogram histogram;
    rpc::Clock::time_point measure_start;
    rpc::Clock::time_point end;
  };
  auto loop = std::make_shared<Loop>();
  std::function<void()> start_one;
  start_one = [&client, loop, size, total, warmup, &start_one] {
    Result<rpc::Message> request = rpc::Message::Allocate(size);
    if (!request.ok()) return;
    const rpc::Clock::time_point start = rpc::Clock::now();
    client.Call("echo", std::move(request).value(), {.timeout = 10s},
                [loop, start, total, warmup, &start_one](Result<rpc::Message> reply) {
                  const rpc::Clock::time_point now = rpc::Clock::now();
                  bool more = false;
                  {
                    std::lock_guard lock(loop->mutex);
                    ++loop->done;
                    if (!reply.ok()) ++loop->errors;
                    if (loop->done == warmup) loop->measure_start = now;
                    if (loop->done > warmup) loop->histogram.Record(now - start);
                    if (loop->started < total) {
                      ++loop->started;
                      more = true;
                    }
                    if (loop->done == total) {
                      loop->end = now;
                      loop->finished.notify_all();
                    }
                  }
                  if (more) start_one();
                });
  };
  {
    std::lock_guard lock(loop->mutex);
    loop->started = std::min(outstanding, total);
  }
  for (int i = 0; i < std::min(outstanding, total); ++i) start_one();
  std::unique_lock lock(loop->mutex);
  if (!loop->finished.wait_for(lock, 300s, [&] { return loop->done == total; })) {
    return Status(StatusCode::kDeadlineExceeded, "bench rpc: loop did not finish in 300 s");
  }
  Row row;
  row.size = size;
  row.outstanding = outstanding;
  const double seconds = std::chrono::duration<double>(loop->end - loop->measure_start).count();
  row.calls_per_sec = seconds > 0 ? calls / seconds : 0;
  row.p50_us = loop->histogram.PercentileUs(0.50);
  row.p99_us = loop->histogram.PercentileUs(0.99);
  row.errors = loop->errors;
  return row;
}

// One open loop: `calls` echo calls started at `rate` per second. At most kMaxInFlight are
// outstanding; beyond that the schedule slips, and the achieved rate (below the offered one)
// says so.
Result<Row> RunBxOpenLoop(rpc::Client& client, size_t size, double rate, int calls) {
  constexpr int kMaxInFlight = 4096;
  struct Loop {
    std::mutex mutex;
    std::condition_variable changed;
    int in_flight = 0;
    int done = 0;
    uint64_t errors = 0;
    rpc::LatencyHistogram histogram;
  };
  auto loop = std::make_shared<Loop>();
  // Warm-up, not measured: connections and buffers in place.
  for (int i = 0; i < 200; ++i) {
    BX_ASSIGN_OR_RETURN(rpc::Message request, rpc::Message::Allocate(size));
    (void)client.Call("echo", std::move(request), {.timeout = 10s}).get();
  }
  prctl(PR_SET_TIMERSLACK, 1UL);  // sleeps end on time (the default slack is 50 us)
  const auto period =
      std::chrono::duration_cast<rpc::Clock::duration>(std::chrono::duration<double>(1.0 / rate));
  const uint64_t cpu0 = ProcessCpuNs(), hardware0 = HardwareCpuNs();
  const rpc::Clock::time_point t0 = rpc::Clock::now();
  for (int i = 0; i < calls; ++i) {
    const rpc::Clock::time_point scheduled = t0 + i * period;
    if (scheduled > rpc::Clock::now()) std::this_thread::sleep_until(scheduled);
    {
      std::unique_lock lock(loop->mutex);
      loop->changed.wait(lock, [&] { return loop->in_flight < kMaxInFlight; });
      ++loop->in_flight;
    }
    BX_ASSIGN_OR_RETURN(rpc::Message request, rpc::Message::Allocate(size));
    client.Call("echo", std::move(request), {.timeout = 10s},
                [loop, scheduled](Result<rpc::Message> reply) {
                  const rpc::Clock::time_point now = rpc::Clock::now();
                  std::lock_guard lock(loop->mutex);
                  --loop->in_flight;
                  ++loop->done;
                  if (!reply.ok()) ++loop->errors;
                  loop->histogram.Record(now - scheduled);
                  loop->changed.notify_all();
                });
  }
  std::unique_lock lock(loop->mutex);
  if (!loop->changed.wait_for(lock, 300s, [&] { return loop->done == calls; })) {
    return Status(StatusCode::kDeadlineExceeded, "bench rpc: open loop did not finish in 300 s");
  }
  const double seconds = std::chrono::duration<double>(rpc::Clock::now() - t0).count();
  const uint64_t host_ns = (ProcessCpuNs() - cpu0) - (HardwareCpuNs() - hardware0);
  Row row;
  row.size = size;
  row.offered_rate = rate;
  row.calls_per_sec = seconds > 0 ? calls / seconds : 0;
  row.p50_us = loop->histogram.PercentileUs(0.50);
  row.p99_us = loop->histogram.PercentileUs(0.99);
  row.errors = loop->errors;
  row.host_cpu_us_per_call = double(host_ns) / 1000.0 / calls;
  return row;
}

Status RunBx(const std::string& scheme, const std::string& label, const BenchRpcOptions& options,
             std::vector<Row>& rows) {
  TransportOptions transport;
  transport.rdma.adaptive_polling = options.adaptive_polling;
  transport.rdma.share_io_threads = options.rdma.share_io_threads;
  rpc::ServerOptions server_options;
  server_options.transport = transport;
  BX_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Server> server, rpc::Server::Create(server_options));
  BX_RETURN_IF_ERROR(server->AddMethod("echo", [](rpc::ServerCall call) {
    rpc::Message request = std::move(call.request());
    call.Respond(std::move(request));
  }));
  BX_RETURN_IF_ERROR(server->Start({scheme + "://127.0.0.1:0"}));
  for (size_t size : kSizes) {
    for (int outstanding : kOutstanding) {
      if (options.rate > 0 && outstanding != kOutstanding[0]) continue;  // one open loop a size
      rpc::ClientOptions client_options;
      client_options.transport = transport;
      client_options.log = [](std::string_view line) {
        // Connection set-up is expected; a fallback or a replica going down is worth a line.
        if (line.find("connecting -> up") != std::string_view::npos) return;
        std::fprintf(stderr, "bx rpc: %.*s\n", static_cast<int>(line.size()), line.data());
      };
      BX_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Client> client,
                          rpc::Client::Create({server->address()}, client_options));
      BX_RETURN_IF_ERROR(client->WaitReady(5s));
      BX_ASSIGN_OR_RETURN(Row row,
                          options.rate > 0
                              ? RunBxOpenLoop(*client, size, options.rate, CallsFor(options, size))
                              : RunBxLoop(*client, size, outstanding, CallsFor(options, size)));
      row.system = "bx-rpc";
      row.transport = label;
      rows.push_back(row);
    }
  }
  return Status::Ok();
}

// --- gRPC ---

std::string GrpcDir() {
  return BinaryDir() + "/grpc_echo";
}

Status EnsureGrpcBuilt() {
  const std::string dir = GrpcDir();
  if (std::filesystem::exists(dir + "/grpc_echo_client") &&
      std::filesystem::exists(dir + "/grpc_echo_server")) {
    return Status::Ok();
  }
  const std::string script = SourceDir() + "/tools/grpc_echo/build.sh";
  std::fprintf(stderr, "bench rpc: building the gRPC echo peer (%s), once...\n", script.c_str());
  const std::string command = "'" + script + "' '" + dir + "'";
  if (std::system(command.c_str()) != 0) {
    return Unavailable("gRPC echo peer could not be built by " + script);
  }
  return Status::Ok();
}

// The gRPC server process: started with a pipe on stdin that keeps it alive.
struct GrpcServer {
  pid_t pid = -1;
  int stdin_fd = -1;
  int port = 0;
  ~GrpcServer() {
    if (stdin_fd >= 0) close(stdin_fd);
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  }
};

Status StartGrpcServer(GrpcServer& server) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return Status::FromErrno(errno, "pipe");
  const std::string path = GrpcDir() + "/grpc_echo_server";
  server.pid = fork();
  if (server.pid == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    close(to_child[1]);
    close(from_child[0]);
    execl(path.c_str(), path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  server.stdin_fd = to_child[1];
  FILE* out = fdopen(from_child[0], "r");
  char line[64] = {};
  if (out == nullptr || std::fgets(line, sizeof(line), out) == nullptr) {
    if (out != nullptr) std::fclose(out);
    return Unavailable("grpc_echo_server did not report its port");
  }
  std::fclose(out);
  server.port = std::atoi(line);
  return Status::Ok();
}

Status RunGrpc(const BenchRpcOptions& options, std::vector<Row>& rows) {
  BX_RETURN_IF_ERROR(EnsureGrpcBuilt());
  GrpcServer server;
  BX_RETURN_IF_ERROR(StartGrpcServer(server));
  for (size_t size : kSizes) {
    for (int outstanding : kOutstanding) {
      const std::string command =
          fmt::format("'{}/grpc_echo_client' {} {} {} {}", GrpcDir(), server.port, size,
                      outstanding, CallsFor(options, size));
      FILE* pipe = popen(command.c_str(), "r");
      if (pipe == nullptr) return Status::FromErrno(errno, "popen grpc_echo_client");
      std::string output;
      char chunk[512];
      while (std::fgets(chunk, sizeof(chunk), pipe) != nullptr) output += chunk;
      pclose(pipe);
      json result = json::parse(output, nullptr, /*allow_exceptions=*/false);
      if (result.is_discarded()) return Internal("grpc_echo_client printed: " + output);
      Row row;
      row.system = "grpc";
      row.transport = "tcp";
      row.size = size;
      row.outstanding = outstanding;
      row.calls_per_sec = result.value("calls_per_sec", 0.0);
      row.p50_us = result.value("p50_us", 0.0);
      row.p99_us = result.value("p99_us", 0.0);
      row.errors = result.value("failed", 0);
      rows.push_back(row);
    }
  }
  return Status::Ok();
}

void PrintOpenLoop(const std::vector<Row>& rows, bool as_json, int cpu_hogs) {
  if (as_json) {
    json out;
    out["benchmark"] = "rpc_open_loop";
    out["cpu_hogs"] = cpu_hogs;
    out["results"] = json::array();
    for (const Row& row : rows) {
      out["results"].push_back({{"transport", row.transport},
                                {"request_bytes", row.size},
                                {"offered_calls_per_sec", row.offered_rate},
                                {"calls_per_sec", row.calls_per_sec},
                                {"p50_us", row.p50_us},
                                {"p99_us", row.p99_us},
                                {"host_cpu_us_per_call", row.host_cpu_us_per_call},
                                {"errors", row.errors}});
    }
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("{:<10} {:>7} {:>9} {:>9} {:>10} {:>10} {:>12} {:>6}\n", "VIA", "REQUEST", "OFFERED",
             "ACHIEVED", "P50_US", "P99_US", "CPU_US/CALL", "ERRORS");
  for (const Row& row : rows) {
    fmt::print("{:<10} {:>7} {:>9.0f} {:>9.0f} {:>10.1f} {:>10.1f} {:>12.2f} {:>6}\n",
               row.transport, SizeLabel(row.size), row.offered_rate, row.calls_per_sec, row.p50_us,
               row.p99_us, row.host_cpu_us_per_call, row.errors);
  }
  // Side by side: each transport's CPU per call over the first one's, size by size.
  for (size_t size : kSizes) {
    const Row* first = nullptr;
    for (const Row& row : rows) {
      if (row.size != size) continue;
      if (first == nullptr) {
        first = &row;
      } else if (row.host_cpu_us_per_call > 0) {
        fmt::print("{} CPU per call, {} / {}: {:.2f}\n", SizeLabel(size), first->transport,
                   row.transport, first->host_cpu_us_per_call / row.host_cpu_us_per_call);
      }
    }
  }
  fmt::print(
      "host CPU = process CPU (client and server) - simnic hardware threads; latency from "
      "each call's scheduled start\n");
  if (cpu_hogs > 0) fmt::print("with {} CPU hog processes running\n", cpu_hogs);
}

void RunBenchRpc(const BenchRpcOptions& options) {
  std::vector<std::string> schemes;
  if (options.transport == "all") {
    schemes = {"rdma", "tcp"};
  } else {
    schemes = {options.transport};
  }
  if (Status s = Init(); !s.ok()) {
    std::fprintf(stderr, "bench rpc: %s\n", s.ToString().c_str());
    throw CLI::RuntimeError(1);
  }
  std::vector<Row> rows;
  const CpuHogs hogs(options.cpu_hogs);
  for (const std::string& scheme : schemes) {
    for (const auto& [label, adaptive] : PollingRuns(scheme, options.rdma)) {
      BenchRpcOptions run = options;
      run.adaptive_polling = adaptive;
      if (Status s = RunBx(scheme, label, run, rows); !s.ok()) {
        std::fprintf(stderr, "bench rpc %s: %s\n", label.c_str(), s.ToString().c_str());
        throw CLI::RuntimeError(1);
      }
    }
  }
  std::string grpc_note;
  if (options.rate > 0) {
    PrintOpenLoop(rows, options.json, hogs.count());
    return;
  }
  if (options.grpc) {
    if (Status s = RunGrpc(options, rows); !s.ok()) grpc_note = s.ToString();
  }
  if (options.json) {
    json out;
    out["benchmark"] = "rpc";
    out["cpu_hogs"] = hogs.count();
    out["results"] = json::array();
    for (const Row& row : rows) {
      out["results"].push_back({{"system", row.system},
                                {"transport", row.transport},
                                {"request_bytes", row.size},
                                {"outstanding", row.outstanding},
                                {"calls_per_sec", row.calls_per_sec},
                                {"p50_us", row.p50_us},
                                {"p99_us", row.p99_us},
                                {"errors", row.errors}});
    }
    if (!grpc_note.empty()) out["grpc_unavailable"] = grpc_note;
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("{:<8} {:<10} {:>7} {:>5} {:>12} {:>10} {:>10} {:>6}\n", "SYSTEM", "VIA", "REQUEST",
             "OUT", "CALLS/S", "P50_US", "P99_US", "ERRORS");
  for (const Row& row : rows) {
    fmt::print("{:<8} {:<10} {:>7} {:>5} {:>12.0f} {:>10.1f} {:>10.1f} {:>6}\n", row.system,
               row.transport, SizeLabel(row.size), row.outstanding, row.calls_per_sec, row.p50_us,
               row.p99_us, row.errors);
  }
  if (!grpc_note.empty()) fmt::print("grpc: not run ({})\n", grpc_note);
  if (hogs.count() > 0) fmt::print("with {} CPU hog processes running\n", hogs.count());
}

}  // namespace

void AddBenchRpcCommand(CLI::App* bench) {
  auto options = std::make_shared<BenchRpcOptions>();
  CLI::App* command = bench->add_subcommand(
      "rpc", "RPC calls/s and p50/p99 for 64 B and 16 KB echo, 1 and 64 outstanding, vs gRPC");
  command->add_option("--transport", options->transport, "rdma, tcp or all (side by side)")
      ->check(CLI::IsMember({"tcp", "rdma", "all"}));
  command->add_option("--calls", options->calls,
                      "Measured calls per configuration (default: 20000 at 64 B, 10000 at 16 KB)");
  command->add_flag("!--no-grpc", options->grpc, "Skip the gRPC peer");
  command
      ->add_option("--rate", options->rate,
                   "Open loop at this many calls/s, with host CPU per call (bexpress only)")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--cpu-hogs", options->cpu_hogs,
                   "Processes that keep a core busy each while the benchmark runs (a host whose "
                   "application uses its cores)")
      ->check(CLI::Range(0, 64));
  AddRdmaPollingOptions(command, &options->rdma);
  command->add_flag("--json", options->json, "Print JSON instead of the table");
  command->callback([options] { RunBenchRpc(*options); });
}

}  // namespace bx::tools
