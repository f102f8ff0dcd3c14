// `bx demo`: a small parameter-server cluster in this process (4 shards x 2 replicas, every
// replica its own rpc::Server), driven by an inference workload (rankers with many outstanding
// Fetch fan-outs) and a training workload (trainers: fetch, stand-in compute, push), first over
// rdma:// on the simnic, then over tcp://, and the two side by side.
//
// Host CPU per request is the process's CPU time minus the simnic's "hardware" threads (which a
// real NIC would not charge to the host) and minus the trainers' stand-in compute (the same on
// both transports; it would only dilute the difference). It covers servers and clients, since
// both run here. With --busy the stand-in compute is a real matrix multiply and one
// background thread per core runs the same multiply throughout (busy_compute.h); the process CPU
// clock counts those threads too, so their CPU, read from their own thread CPU clocks, is
// subtracted as well: host CPU per request stays the demo's own.
//
// Public API only (include/bx/), except two looks inside: the synthetic workloads of the paper
// (ps/workload.h: key and size distributions, benchmark input rather than API) and the simnic's
// hardware-thread CPU counter (verbs/verbs.h).
#include <sys/resource.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "busy_compute.h"
#include "bx/init.h"
#include "bx/metrics.h"
#include "bx/observe.h"
#include "bx/ps/client.h"
#include "bx/ps/server.h"
#include "commands.h"
#include "demo_format.h"
#include "ps/workload.h"
#include "ps_reach.h"
#include "ps_workload.h"
#include "repeat_limiter.h"
#include "verbs/rc_count.h"
#include "verbs/verbs.h"

namespace bx::tools {
namespace {

using namespace std::chrono_literals;
using namespace bx::ps;
using Clock = std::chrono::steady_clock;

struct DemoOptions {
  double duration_s = 60;  // total over 2 workloads x 2 transports
  int shards = 4;
  int replicas = 2;
  int rankers = 2;
  int outstanding = 8;  // Fetch fan-outs in flight per ranker
  // > 0: the rankers together start this many fan-outs per second (Poisson arrivals, the same
  // schedule over both transports), so the two are compared at the same load; 0: each ranker
  // keeps `outstanding` in flight (closed loop). Either way `outstanding` caps what is in flight.
  double inference_rate = 0;
  // Closed loop: a fan-out that completes starts the ranker's next one from its callback, so
  // `outstanding` stay in flight over both transports. false: the ranker thread starts it once it
  // is woken, and how late that is depends on how busy the CPU is, which differs by transport.
  bool refill_from_completion = true;
  int trainers = 4;
  int compute_us = 200;  // stand-in forward/backward per training step
  // --busy: every core runs model work (a BusyHost) beside the demo, and a training step's
  // compute is a matrix multiply of this size (calibrated to about compute_us) instead of a spin
  // on the clock. 0: not busy.
  bool busy = false;
  size_t matmul_n = 0;
  uint32_t dim = 64;
  // Keys the workloads draw from (Zipf). The demo loads every one of them before the clock
  // starts, as a trained model would hold them: see LoadTable.
  uint64_t key_space = 1 << 18;
  bool json = false;
  int metrics_port = -1;  // >= 0: serve /metrics on it (0: any free port)
  // rdma: every server, backup client and client of the process on one set of I/O threads, as
  // they share one NIC (RdmaOptions::share_io_threads); false gives each transport its own.
  bool share_io_threads = true;
};

constexpr uint32_t kTable = 1;
// Inference requests drawn per ranker before the clock starts, then sent in turn.
constexpr size_t kDrawnRequests = 512;

uint64_t ThreadCpuNs() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return uint64_t(now.tv_sec) * 1000000000 + uint64_t(now.tv_nsec);
}
// CPU by thread name since the process started, for the split of host CPU per request: RPC
// workers (where the parameter server's handlers run), transport I/O threads (sends, receives,
// completions, and the client's reply handling that runs on them), and the process's time in the
// kernel. From /proc/self/task: schedstat's run time (ns) per thread; getrusage for system time.
struct CpuSplit {
  uint64_t workers_ns = 0, io_ns = 0, kernel_ns = 0;
};
CpuSplit SampleCpuSplit() {
  CpuSplit split;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm_file(task.path() / "comm");
    std::ifstream sched_file(task.path() / "schedstat");
    std::string comm;
    uint64_t run_ns = 0;
    if (!std::getline(comm_file, comm) || !(sched_file >> run_ns)) continue;  // it exited
    if (comm.starts_with("bx-rpc-worker")) split.workers_ns += run_ns;
    if (comm.starts_with("bx-rdma-io") || comm.starts_with("bx-tcp-io")) split.io_ns += run_ns;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  split.kernel_ns =
      uint64_t(usage.ru_stime.tv_sec) * 1000000000 + uint64_t(usage.ru_stime.tv_usec) * 1000;
  return split;
}

[[noreturn]] void Fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "demo: %s: %s\n", what.c_str(), status.ToString().c_str());
  throw CLI::RuntimeError(1);
}

void InitProcess() {
  setenv("BX_VERBS", "sim", /*overwrite=*/0);  // the simnic unless the user chose otherwise
  if (Status s = bx::Init(); !s.ok()) Fail("init", s);
}

}  // namespace

std::unique_ptr<metrics::MetricsServer> StartMetricsEndpoint(int port, const std::string& address) {
  if (port < 0) return nullptr;
  metrics::HttpServerOptions options;
  options.port = uint16_t(port);
  options.address = address;
  Result<std::unique_ptr<metrics::MetricsServer>> server = metrics::StartHttpServer(options);
  if (!server.ok()) Fail("metrics endpoint", server.status());
  // The process's RC QPs over all its transports (servers' included, whose engines rpc::Server
  // does not export): what tools/paper_cluster.sh compares with the peers a process has.
  // With its CPU and the simnic's share of it (which a real NIC would not charge to the host).
  static metrics::CollectorHandle process =
      metrics::Registry::Default().AddCollector([](metrics::SampleWriter& out) {
        out.Gauge("bx_process_rc_qps", "RC queue pairs this process holds (all transports)", {},
                  double(verbs::LiveRcQueuePairs()));
        out.Counter("bx_process_cpu_seconds_total", "CPU time of this process", {},
                    double(ProcessCpuNs()) / 1e9);
        out.Counter("bx_process_simnic_cpu_seconds_total",
                    "CPU time of the simnic's hardware work in this process", {},
                    double(HardwareCpuNs()) / 1e9);
      });
  std::fprintf(stderr, "metrics: http://%s:%u/metrics\n", address.c_str(), (*server)->port());
  return std::move(server).value();
}

namespace {

struct Figures {
  double fetch_mean_us = 0, fetch_p50_us = 0, fetch_p99_us = 0, push_p50_us = 0, push_p99_us = 0;
  double requests_per_sec = 0, host_cpu_us_per_request = 0;
  uint64_t requests = 0, errors = 0;
  std::map<std::string, uint64_t> engine;  // rdma engine counters (client side)
  uint64_t fallbacks = 0, rpc_retries = 0;
  double load_s = 0;   // LoadTable, before the clock
  double rss_mib = 0;  // the process's resident set as the run ends (its cluster still up)
  // Host CPU per request split by where it ran (SampleCpuSplit); the rest is client threads.
  double workers_us_per_request = 0, io_us_per_request = 0, kernel_us_per_request = 0;
  // CPU the busy host's compute threads took during the run (left out of host CPU), and the
  // trainers' mean CPU per step's compute (training only).
  double busy_cpu_s = 0, compute_us_per_step = 0;
  // The raw CPU behind host_cpu_us_per_request: the process's, the simnic's hardware work's and
  // the trainers' stand-in compute's, over the run (ms).
  double process_cpu_ms = 0, simnic_cpu_ms = 0, compute_cpu_ms = 0;
};

// VmRSS from /proc/self/status, in MiB (0 if unreadable).
double ResidentMiB() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  double kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %lf kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib / 1024.0;
}

// The cluster, the client transport and the PS client for one scheme.
class DemoCluster {
 public:
  DemoCluster(const DemoOptions& options, const std::string& scheme) : scheme_(scheme) {
    const bool exported = options.metrics_port >= 0;
    TableConfig table;
    table.id = kTable;
    table.name = "embedding";
    table.dim = options.dim;
    table.init.kind = InitializerKind::kNormal;
    table.init.seed = 7;
    table.optimizer.kind = OptimizerKind::kAdagrad;
    table.optimizer.learning_rate = 0.05f;
    spec_.transport = scheme;
    spec_.tables = {table};
    auto quiet = [](std::string_view) {};
    TransportOptions transport_options;
    transport_options.rdma.share_io_threads = options.share_io_threads;
    for (int s = 0; s < options.shards; ++s) {
      ShardSpec shard;
      std::vector<rpc::ReplicaAddress> addresses;
      servers_.emplace_back();
      for (int r = 0; r < options.replicas; ++r) {
        PsServerOptions server_options;
        server_options.rpc.transport = transport_options;
        server_options.backup_client.transport = transport_options;
        server_options.rpc.worker_threads = 1;
        server_options.rpc.log = quiet;
        server_options.backup_client.log = quiet;
        Result<std::unique_ptr<PsServer>> server = PsServer::Create(spec_.tables, server_options);
        if (!server.ok()) Fail("server", server.status());
        if (Status st = (*server)->Start({scheme + "://127.0.0.1:0"}); !st.ok()) {
          Fail("listen", st);
        }
        if (exported) {
          exports_.Add(observe::ExportPsServer(**server, {{"transport", scheme},
                                                          {"shard", std::to_string(s)},
                                                          {"replica", std::to_string(r)}}));
        }
        addresses.push_back((*server)->address());
        shard.replicas.push_back({addresses.back().rdma_url, addresses.back().tcp_url});
        servers_.back().push_back(std::move(server).value());
      }
      std::vector<rpc::ReplicaAddress> backups(addresses.begin() + 1, addresses.end());
      if (Status st = servers_.back()[0]->BecomePrimary(1, backups); !st.ok()) {
        Fail("promote", st);
      }
      spec_.shards.push_back(shard);
    }
    // The clients' transport is ours, so that its engine counters can be read afterwards.
    Result<std::unique_ptr<Transport>> transport = CreateTransport(scheme, transport_options);
    if (!transport.ok()) Fail("client transport", transport.status());
    transport_ = std::move(transport).value();
    PsClientOptions client_options;
    client_options.transport = scheme;
    client_options.rpc.log = quiet;
    // The demo measures load, not failure detection, and its one process holds every server,
    // client and (--busy) compute thread: on a loaded 2-core host (CI) a live in-process server
    // sent nothing for 501 ms, the client's default 500 ms declared it dead, and 47 fetches
    // failed as "no replica is reachable". A margin a loaded host does not cross by accident.
    client_options.rpc.heartbeat_timeout = std::chrono::seconds(3);
    (scheme == "rdma" ? client_options.rpc.rdma_transport : client_options.rpc.tcp_transport) =
        transport_.get();
    Result<std::unique_ptr<PsClient>> client = PsClient::Create(spec_, client_options);
    if (!client.ok()) Fail("client", client.status());
    client_ = std::move(client).value();
    if (exported) {
      exports_.Add(observe::ExportPsClient(*client_, {{"transport", scheme}}));
      if (scheme == "rdma") {
        if (Status st = exports_.Add(observe::ExportRdmaTransport(
                *transport_, {{"transport", scheme}, {"role", "client"}}));
            !st.ok()) {
          Fail("export", st);
        }
      }
    }
  }
  ~DemoCluster() {
    exports_.Clear();  // before what the collectors read
    client_.reset();   // before the transport it uses and the servers it talks to
    transport_.reset();
    servers_.clear();
  }

  PsClient& client() { return *client_; }
  // The client engines' counters summed over engines, read as a scrape would (from the
  // transport's collector in a registry of our own): "credit_stalls" for
  // bx_engine_credit_stalls_total. Empty over tcp.
  std::map<std::string, uint64_t> EngineCounters() {
    std::map<std::string, uint64_t> out;
    if (scheme_ != "rdma") return out;
    metrics::Registry registry;
    Result<metrics::CollectorHandle> handle =
        observe::ExportRdmaTransport(*transport_, {}, registry);
    if (!handle.ok()) Fail("engine counters", handle.status());
    constexpr std::string_view kPrefix = "bx_engine_", kSuffix = "_total";
    for (const metrics::Sample& sample : registry.Collect()) {
      std::string_view name = sample.name;
      if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) continue;
      name = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
      out[std::string(name)] += uint64_t(sample.value);
    }
    return out;
  }

 private:
  std::string scheme_;
  ClusterSpec spec_;
  std::vector<std::vector<std::unique_ptr<PsServer>>> servers_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<PsClient> client_;
  observe::Exports exports_;
};

struct Recorder {
  std::mutex mu;
  rpc::LatencyHistogram fetch, push;
  std::atomic<uint64_t> requests{0}, errors{0};
  // `bx ps rank/train`: why requests fail, through a RepeatLimiter (one line a second per kind).
  RepeatLimiter* error_log = nullptr;
  void Error(const char* what, const Status& status) {
    errors.fetch_add(1);
    if (error_log != nullptr)
      error_log->Report(std::string(what) + " failed: " + status.ToString());
  }
  void Fetch(Clock::duration latency) {
    std::lock_guard lock(mu);
    fetch.Record(latency);
  }
  void Push(Clock::duration latency) {
    std::lock_guard lock(mu);
    push.Record(latency);
  }
};

// Prints "[rdma inference] 7.0/15.0 s  1234 requests" to stderr about twice a second.
class Progress {
 public:
  Progress(std::string label, double seconds, Recorder& recorder)
      : thread_([this, label, seconds, &recorder] {
          auto start = Clock::now();
          std::unique_lock lock(mu_);
          while (!cv_.wait_for(lock, 500ms, [this] { return done_; })) {
            double t = std::chrono::duration<double>(Clock::now() - start).count();
            std::fprintf(stderr, "\r[%s] %5.1f/%.1f s  %8llu requests  %llu errors   ",
                         label.c_str(), t, seconds,
                         static_cast<unsigned long long>(recorder.requests.load()),
                         static_cast<unsigned long long>(recorder.errors.load()));
          }
          std::fprintf(stderr, "\r%*s\r", 72, "");
        }) {}
  ~Progress() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Each ranker's inference requests (keys; the response's value bytes log-uniform from 1 KiB to
// 2 MiB), drawn before the clock starts and then sent in turn. Drawn between sends (Zipf, up to
// 8,192 keys each) they took the ranker thread's CPU from the transport it measures, and how full
// its window stayed then depended on the transport.
using DrawnRequests = std::vector<std::vector<std::vector<uint64_t>>>;

DrawnRequests DrawInferenceRequests(const DemoOptions& options) {
  Result<ps::LogUniformSizes> sizes = ps::LogUniformSizes::Create();
  if (!sizes.ok()) Fail("sizes", sizes.status());
  ps::ZipfKeys keys(options.key_space);
  DrawnRequests drawn(options.rankers);
  for (int r = 0; r < options.rankers; ++r) {
    ps::Rng rng(1000 + r);
    drawn[r].resize(kDrawnRequests);
    for (std::vector<uint64_t>& request : drawn[r]) {
      request.resize(std::max<uint64_t>(1, sizes->Sample(rng) / (4 * uint64_t{options.dim})));
      for (auto& key : request) key = keys.Next(rng);
    }
  }
  return drawn;
}

// Closed loop, refilled from completions: `outstanding` chains of fetches per ranker, each
// fetch started by the callback of the one before it. A failed fetch hands its chain back to the
// ranker thread (a failure may come inline, and restarting it there could recurse).
void RunRankerChains(const DemoOptions& options, PsClient& client, Clock::time_point end,
                     const std::vector<std::vector<uint64_t>>& requests, Recorder& recorder) {
  std::mutex mu;
  std::condition_variable cv;
  int chains = options.outstanding;  // guarded by mu: chains not yet ended
  int to_restart = 0;                // guarded by mu: chains whose last fetch failed
  std::atomic<size_t> next{0};
  std::function<void()> start_fetch = [&] {
    const std::vector<uint64_t>& request = requests[next.fetch_add(1) % requests.size()];
    const auto start = Clock::now();
    client.FetchRowsAsync(kTable, request, 2s, [&, start](Result<ps::FetchedRows> result) {
      const auto now = Clock::now();
      if (result.ok()) {
        recorder.Fetch(now - start);
        recorder.requests.fetch_add(1);
        if (now < end) return start_fetch();
      } else {
        recorder.Error("fetch", result.status());
      }
      std::lock_guard lock(mu);
      if (!result.ok() && now < end) {
        ++to_restart;
      } else {
        --chains;
      }
      cv.notify_all();
    });
  };
  for (int i = 0; i < options.outstanding; ++i) start_fetch();
  std::unique_lock lock(mu);
  for (;;) {
    cv.wait(lock, [&] { return chains == 0 || to_restart > 0; });
    if (chains == 0) break;
    --to_restart;
    lock.unlock();
    start_fetch();
    lock.lock();
  }
}

// Rankers: each keeps `outstanding` fan-out fetches in flight, sending its drawn requests (by
// default each restarted from its completion: RunRankerChains); with an inference rate, each
// starts its share of them at Poisson arrival times instead, and a fetch's latency runs from the
// time it was due, so waiting for a free slot behind slow fetches counts (no coordinated
// omission).
void RunInference(const DemoOptions& options, PsClient& client, double seconds,
                  const DrawnRequests& drawn, Recorder& recorder) {
  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  const bool open_loop = options.inference_rate > 0;
  std::vector<std::thread> rankers;
  for (int r = 0; r < options.rankers; ++r) {
    rankers.emplace_back([&, r] {
      if (!open_loop && options.refill_from_completion) {
        return RunRankerChains(options, client, end, drawn[r], recorder);
      }
      std::mutex mu;
      std::condition_variable cv;
      int in_flight = 0;
      ps::Rng rng(7000 + r);  // the same arrival times for every transport
      const double per_ranker = options.inference_rate / options.rankers;
      Clock::time_point due = t0;
      for (size_t next = 0;; next = (next + 1) % kDrawnRequests) {
        if (open_loop) {
          due += std::chrono::duration_cast<Clock::duration>(
              std::chrono::duration<double>(-std::log(1.0 - rng.Uniform()) / per_ranker));
          if (due >= end) break;
          std::this_thread::sleep_until(due);
        } else if (Clock::now() >= end) {
          break;
        }
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return in_flight < options.outstanding; });
          ++in_flight;
        }
        const std::vector<uint64_t>& request = drawn[r][next];
        const auto start = open_loop ? due : Clock::now();
        client.FetchRowsAsync(kTable, request, 2s, [&, start](Result<ps::FetchedRows> result) {
          if (result.ok()) {
            recorder.Fetch(Clock::now() - start);
            recorder.requests.fetch_add(1);
          } else {
            recorder.Error("fetch", result.status());
          }
          std::lock_guard lock(mu);
          --in_flight;
          cv.notify_all();
        });
      }
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return in_flight == 0; });
    });
  }
  for (auto& ranker : rankers) ranker.join();
}

// The CPU the trainers' compute took, over how many steps.
struct ComputeTime {
  uint64_t cpu_ns = 0, steps = 0;
};

// Trainers: fetch a batch's rows, compute (busy CPU), push a gradient to every shard touched.
// Batch sizes (push bytes) are lognormal with mean 20 KiB and P99 50 KiB. Returns the CPU the
// compute took.
ComputeTime RunTraining(const DemoOptions& options, PsClient& client, double seconds,
                        Recorder& recorder) {
  Result<ps::LogNormalSizes> sizes = ps::LogNormalSizes::Create();
  if (!sizes.ok()) Fail("sizes", sizes.status());
  ps::ZipfKeys keys(options.key_space);
  auto end = Clock::now() +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::atomic<uint64_t> compute_ns{0}, steps{0};
  std::vector<std::thread> trainers;
  for (int t = 0; t < options.trainers; ++t) {
    trainers.emplace_back([&, t] {
      ps::Rng rng(2000 + t);
      std::vector<float> gradients;
      // --busy: the step's model work, allocated before the first step.
      std::unique_ptr<busy::MatMul> matmul;
      if (options.matmul_n > 0) matmul = std::make_unique<busy::MatMul>(options.matmul_n);
      while (Clock::now() < end) {
        uint64_t n = ps::KeysForBytes(sizes->Sample(rng), options.dim);
        std::vector<uint64_t> batch(n);
        for (auto& key : batch) key = keys.Next(rng);
        auto start = Clock::now();
        Result<ps::FetchedRows> rows = client.FetchRows(kTable, batch, 2s);
        if (!rows.ok()) {
          recorder.Error("fetch", rows.status());
          continue;
        }
        recorder.Fetch(Clock::now() - start);
        recorder.requests.fetch_add(1);
        // Stand-in forward/backward: derives a gradient from the rows, then either one matrix
        // multiply (--busy: real work, sized at start-up to take about compute_us) or, by
        // default, the same derivation again until compute_us have passed on the clock.
        uint64_t cpu_start = ThreadCpuNs();
        auto busy_until = Clock::now() + std::chrono::microseconds(options.compute_us);
        gradients.resize(rows->rows() * rows->dim());
        const float* values = rows->data();
        float acc = 0;
        do {
          for (size_t i = 0; i < gradients.size(); ++i) {
            acc = acc * 0.5f + values[i];
            gradients[i] = 0.001f * acc;
          }
        } while (matmul == nullptr && Clock::now() < busy_until);
        if (matmul != nullptr) busy::Sink(matmul->Run());
        compute_ns.fetch_add(ThreadCpuNs() - cpu_start);
        steps.fetch_add(1);
        start = Clock::now();
        Status pushed = client.Push(kTable, options.dim, batch, gradients, 2s);
        if (!pushed.ok()) {
          recorder.Error("push", pushed);
          continue;
        }
        recorder.Push(Clock::now() - start);
        recorder.requests.fetch_add(1);
      }
    });
  }
  for (auto& trainer : trainers) trainer.join();
  return {compute_ns.load(), steps.load()};
}

// Materialises every row of the key space once, before the clock starts: a push of zero
// gradients stores a key's row (its initial values) and changes no value. Without it every
// inference fetch would generate each row again (a fetch never stores one, ps/table.cc), and the
// demo would measure the initialiser's Box-Muller rather than the transport. A few pushes are
// kept in flight: a load of the default 2^18 keys took 2.2-2.5 s one push at a time, 1.7-2.2 s
// so (its cost is the rows' first touch and initial values). Returns the seconds it took.
double LoadTable(const DemoOptions& options, PsClient& client, const std::string& scheme) {
  constexpr uint64_t kBatch = 2048;
  constexpr int kInFlight = 4;
  auto start = Clock::now();
  const std::vector<float> zeros(kBatch * options.dim, 0.0f);
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  Status first_error;
  std::vector<uint64_t> keys;
  for (uint64_t rank = 0; rank < options.key_space; rank += kBatch) {
    keys.clear();
    for (uint64_t r = rank; r < std::min(options.key_space, rank + kBatch); ++r)
      keys.push_back(Mix64(r));  // ZipfKeys' key of rank r
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return in_flight < kInFlight; });
      if (!first_error.ok()) break;
      ++in_flight;
    }
    // PushAsync copies keys and gradients before it returns: `keys` is refilled at once.
    client.PushAsync(kTable, options.dim, keys,
                     std::span<const float>(zeros).first(keys.size() * options.dim), 30s,
                     [&](Status pushed) {
                       std::lock_guard lock(mu);
                       if (!pushed.ok() && first_error.ok()) first_error = pushed;
                       --in_flight;
                       cv.notify_all();
                     });
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return in_flight == 0; });
  if (!first_error.ok()) Fail(scheme + " table load", first_error);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A run's figures from its recorder: counts, latencies and the rate over `elapsed` seconds.
Figures FiguresOf(const Recorder& recorder, double elapsed) {
  Figures f;
  f.requests = recorder.requests.load();
  f.errors = recorder.errors.load();
  f.fetch_mean_us = recorder.fetch.MeanUs();
  f.fetch_p50_us = recorder.fetch.PercentileUs(0.50);
  f.fetch_p99_us = recorder.fetch.PercentileUs(0.99);
  f.push_p50_us = recorder.push.PercentileUs(0.50);
  f.push_p99_us = recorder.push.PercentileUs(0.99);
  f.requests_per_sec = elapsed > 0 ? f.requests / elapsed : 0;
  return f;
}

// Host CPU over a run, from construction to Fill: the process's, minus the simnic's hardware
// threads, the trainers' compute and the busy host's compute threads (`busy`, may be null), per
// request, and its split by thread. The kernel share is the process's system time, compute
// threads included (they make no system calls after they start).
class HostCpuMeter {
 public:
  explicit HostCpuMeter(const busy::BusyHost* busy = nullptr)
      : busy_(busy),
        cpu0_(ProcessCpuNs()),
        hardware0_(HardwareCpuNs()),
        busy0_(busy ? busy->CpuNs() : 0),
        split0_(SampleCpuSplit()) {}

  // Sets f's host CPU figures and RSS (f.requests already set).
  void Fill(uint64_t compute_ns, Figures& f) const {
    const uint64_t cpu = ProcessCpuNs() - cpu0_, hardware = HardwareCpuNs() - hardware0_;
    const uint64_t busy = busy_ ? busy_->CpuNs() - busy0_ : 0;
    const CpuSplit split1 = SampleCpuSplit();
    auto per_request = [&](double ns) { return f.requests ? ns / 1000.0 / f.requests : 0.0; };
    f.host_cpu_us_per_request =
        per_request(double(cpu) - double(hardware) - double(compute_ns) - double(busy));
    f.busy_cpu_s = double(busy) / 1e9;
    f.workers_us_per_request = per_request(double(split1.workers_ns - split0_.workers_ns));
    f.io_us_per_request = per_request(double(split1.io_ns - split0_.io_ns));
    f.kernel_us_per_request = per_request(double(split1.kernel_ns - split0_.kernel_ns));
    f.rss_mib = ResidentMiB();
    f.process_cpu_ms = double(cpu) / 1e6;
    f.simnic_cpu_ms = double(hardware) / 1e6;
    f.compute_cpu_ms = double(compute_ns) / 1e6;
  }

 private:
  const busy::BusyHost* busy_;
  const uint64_t cpu0_, hardware0_, busy0_;
  const CpuSplit split0_;
};

Figures RunWorkload(const DemoOptions& options, const std::string& scheme, bool training,
                    double seconds, const busy::BusyHost* busy_host) {
  DemoCluster cluster(options, scheme);
  const double load_s = LoadTable(options, cluster.client(), scheme);
  // Connections first, so set-up is not measured.
  {
    std::vector<uint64_t> warm;
    for (uint64_t k = 0; k < 64; ++k) warm.push_back(Mix64(k));
    Result<ps::FetchResult> r = cluster.client().Fetch(kTable, warm, 5s);
    if (!r.ok()) Fail(scheme + " warm-up fetch", r.status());
  }
  const DrawnRequests drawn = training ? DrawnRequests{} : DrawInferenceRequests(options);
  // Why requests fail, on stderr once a second per kind (a count of errors alone says nothing).
  RateLimitedStderrLog error_log;
  Recorder recorder;
  recorder.error_log = &error_log.limiter();
  ps::PsClientStats before = cluster.client().stats();
  std::map<std::string, uint64_t> engine_before = cluster.EngineCounters();
  const HostCpuMeter cpu(busy_host);
  auto t0 = Clock::now();
  ComputeTime compute;
  {
    Progress progress(scheme + (training ? " training" : " inference"), seconds, recorder);
    if (training) {
      compute = RunTraining(options, cluster.client(), seconds, recorder);
    } else {
      RunInference(options, cluster.client(), seconds, drawn, recorder);
    }
  }
  Figures f = FiguresOf(recorder, std::chrono::duration<double>(Clock::now() - t0).count());
  cpu.Fill(compute.cpu_ns, f);
  if (compute.steps > 0) f.compute_us_per_step = double(compute.cpu_ns) / 1000.0 / compute.steps;
  ps::PsClientStats after = cluster.client().stats();
  for (const auto& [name, value] : cluster.EngineCounters()) {
    f.engine[name] = value - engine_before[name];
  }
  f.fallbacks = after.rpc.fallbacks_to_tcp - before.rpc.fallbacks_to_tcp;
  f.rpc_retries = after.rpc.retries - before.rpc.retries;
  f.load_s = load_s;
  return f;
}

void PrintTable(const std::string& title, const Figures& rdma, const Figures& tcp, bool training,
                bool open_loop = false) {
  std::printf("\n%s\n", title.c_str());
  std::printf("%-28s %12s %12s %12s\n", "", "RDMA", "TCP", "reduction");
  auto row = [](const char* name, double r, double t, std::string red) {
    std::printf("%-28s %12.1f %12.1f %12s\n", name, r, t, red.c_str());
  };
  // A figure where lower is better, with RDMA's reduction against TCP.
  auto lower_better = [&](const char* name, double Figures::*field) {
    row(name, rdma.*field, tcp.*field, Reduction(rdma.*field, tcp.*field));
  };
  lower_better("fetch latency mean (us)", &Figures::fetch_mean_us);
  lower_better("fetch latency P99 (us)", &Figures::fetch_p99_us);
  if (training) {
    lower_better("push latency P99 (us)", &Figures::push_p99_us);
  } else {
    std::printf("%-28s %12s %12s %12s\n", "push latency P99 (us)", "-", "-", "(no pushes)");
  }
  // For requests/s more is better: the column shows the gain, or the loss, instead.
  row("requests per second", rdma.requests_per_sec, tcp.requests_per_sec,
      Gain(rdma.requests_per_sec, tcp.requests_per_sec));
  if (!training) {
    // Little's law: the fan-outs a run kept in flight on average (at most rankers x outstanding).
    // Runs that kept different numbers in flight compare latencies at different loads. Open loop,
    // latencies run from when a fetch was due, so this counts those waiting for a slot too.
    row(open_loop ? "fetches due, not done (mean)" : "fetches in flight (mean)",
        rdma.requests_per_sec * rdma.fetch_mean_us / 1e6,
        tcp.requests_per_sec * tcp.fetch_mean_us / 1e6, "");
  }
  lower_better("host CPU per request (us)", &Figures::host_cpu_us_per_request);
  lower_better("  on RPC workers (PS work)", &Figures::workers_us_per_request);
  lower_better("  on transport I/O threads", &Figures::io_us_per_request);
  lower_better("  in the kernel (all threads)", &Figures::kernel_us_per_request);
  if (training)
    row("compute CPU per step (us)", rdma.compute_us_per_step, tcp.compute_us_per_step, "");
  if (rdma.busy_cpu_s > 0 || tcp.busy_cpu_s > 0) {
    row("busy threads' CPU (s, left out)", rdma.busy_cpu_s, tcp.busy_cpu_s, "");
  }
  std::printf("%-28s %12llu %12llu\n", "requests", static_cast<unsigned long long>(rdma.requests),
              static_cast<unsigned long long>(tcp.requests));
  std::printf("%-28s %12llu %12llu\n", "errors", static_cast<unsigned long long>(rdma.errors),
              static_cast<unsigned long long>(tcp.errors));
  auto counter = [&](const char* name) {
    auto it = rdma.engine.find(name);
    std::printf("%-28s %12s %12s\n", name,
                it == rdma.engine.end() ? "n/a" : std::to_string(it->second).c_str(), "n/a");
  };
  counter("rnr_events");
  counter("credit_stalls");
  counter("window_stalls");
  std::printf("%-28s %12llu %12llu\n", "fallbacks to tcp",
              static_cast<unsigned long long>(rdma.fallbacks),
              static_cast<unsigned long long>(tcp.fallbacks));
  lower_better("RSS at the end (MiB)", &Figures::rss_mib);
  row("table load (s, unclocked)", rdma.load_s, tcp.load_s, "");
}

nlohmann::json ToJson(const Figures& f) {
  nlohmann::json j = {{"fetch_mean_us", f.fetch_mean_us},
                      {"fetch_p50_us", f.fetch_p50_us},
                      {"fetch_p99_us", f.fetch_p99_us},
                      {"push_p50_us", f.push_p50_us},
                      {"push_p99_us", f.push_p99_us},
                      {"requests_per_sec", f.requests_per_sec},
                      {"host_cpu_us_per_request", f.host_cpu_us_per_request},
                      {"requests", f.requests},
                      {"errors", f.errors},
                      {"fallbacks", f.fallbacks},
                      {"rpc_retries", f.rpc_retries},
                      {"rss_mib", f.rss_mib},
                      {"workers_us_per_request", f.workers_us_per_request},
                      {"io_us_per_request", f.io_us_per_request},
                      {"kernel_us_per_request", f.kernel_us_per_request},
                      {"busy_cpu_s", f.busy_cpu_s},
                      {"compute_us_per_step", f.compute_us_per_step},
                      {"table_load_s", f.load_s},
                      {"process_cpu_ms", f.process_cpu_ms},
                      {"simnic_cpu_ms", f.simnic_cpu_ms},
                      {"compute_cpu_ms", f.compute_cpu_ms}};
  for (const char* name : {"rnr_events", "credit_stalls", "window_stalls"}) {
    auto it = f.engine.find(name);
    j[name] = it == f.engine.end() ? nlohmann::json(nullptr) : nlohmann::json(it->second);
  }
  return j;
}

void RunDemo(const DemoOptions& given) {
  DemoOptions options = given;
  // --busy: the multiply's size is calibrated first, on a still idle host and before any clock
  // the demo reads.
  busy::Calibration calibration;
  if (options.busy) {
    calibration = busy::Calibrate(options.compute_us);
    options.matmul_n = calibration.n;
  }
  InitProcess();
  std::unique_ptr<metrics::MetricsServer> metrics_endpoint =
      StartMetricsEndpoint(options.metrics_port, "127.0.0.1");
  double each = options.duration_s / 4;
  std::map<std::string, std::map<std::string, Figures>> results;
  int busy_threads = 0;
  uint64_t busy_multiplies = 0;
  {
    // Model work on every core across all four runs, so both transports meet the same busy host.
    std::unique_ptr<busy::BusyHost> busy_host;
    if (options.busy) {
      busy_host = std::make_unique<busy::BusyHost>(
          int(std::max(1u, std::thread::hardware_concurrency())), calibration.n);
      busy_threads = busy_host->threads();
    }
    for (const char* workload : {"inference", "training"}) {
      for (const char* scheme : {"rdma", "tcp"}) {
        results[workload][scheme] = RunWorkload(
            options, scheme, std::string(workload) == "training", each, busy_host.get());
      }
    }
    if (busy_host) busy_multiplies = busy_host->Multiplies();
  }
  if (options.json) {
    nlohmann::json out;
    for (auto& [workload, by_scheme] : results) {
      for (auto& [scheme, figures] : by_scheme) out[workload][scheme] = ToJson(figures);
    }
    out["inference"]["offered_rate"] = options.inference_rate;  // 0: closed loop
    out["inference"]["refill_from_completion"] = options.refill_from_completion;
    out["busy"] = {{"enabled", options.busy},
                   {"compute_threads", busy_threads},
                   {"matrix_n", calibration.n},
                   {"calibrated_us_per_multiply", calibration.us_per_multiply},
                   {"background_multiplies", busy_multiplies}};
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf(
      "bx demo: %d shards x %d replicas in-process, dim %u, %.0f s per workload and "
      "transport (rdma on the %s)\n",
      options.shards, options.replicas, options.dim, each,
      std::getenv("BX_VERBS") ? std::getenv("BX_VERBS") : "default verbs");
  if (options.busy) {
    fmt::print(
        "busy host: {} compute threads (one per core) multiplying {}x{} float matrices "
        "throughout ({} multiplies), and each training step one such multiply; calibrated at "
        "start-up to {:.0f} us of CPU per multiply (--compute-us {})\n",
        busy_threads, calibration.n, calibration.n, busy_multiplies, calibration.us_per_multiply,
        options.compute_us);
  } else {
    std::printf(
        "busy host: no (trainers spin on the clock for --compute-us; --busy for real work)\n");
  }
  const std::string load =
      options.inference_rate > 0
          ? fmt::format(
                "{:.0f} fan-out fetches/s offered (Poisson) by {} rankers, at most {} "
                "in flight each",
                options.inference_rate, options.rankers, options.outstanding)
          : fmt::format("{} rankers x {} outstanding fan-out fetches{}", options.rankers,
                        options.outstanding,
                        options.refill_from_completion ? "" : " (refilled by the ranker)");
  PrintTable(fmt::format("inference: {}, sizes log-uniform 1 KiB..2 MiB", load),
             results["inference"]["rdma"], results["inference"]["tcp"], false,
             options.inference_rate > 0);
  PrintTable(fmt::format("training: {} trainers, fetch + {} us compute + push, sizes lognormal "
                         "mean 20 KiB P99 50 KiB (requests = fetches + pushes)",
                         options.trainers, options.compute_us),
             results["training"]["rdma"], results["training"]["tcp"], true);
  fmt::print(
      "\nhost CPU = process CPU - simnic hardware threads - trainer compute - busy compute threads "
      "(servers and clients both in this process). Engine counters: client-side rdma engines only "
      "(server engines are "
      "inside rpc::Server, not reachable through its API); tcp has no engine. Fallbacks: the demo "
      "gives each run only one scheme's urls, so the RPC client has nothing to fall back to. "
      "The split: run time of the threads named bx-rpc-worker and bx-{{rdma,tcp}}-io, and the "
      "process's system time (the simnic's threads included). "
      "Each run first loads the table's {} keys (zero-gradient pushes that store every row; "
      "not clocked). RSS is the whole process's as the run ends: memory that earlier runs "
      "freed and the allocators kept counts too.\n",
      options.key_space);
}

}  // namespace

void RunPsWorkload(const ps::ClusterSpec& spec, const std::string& scheme, bool training,
                   double seconds, int threads, bool json, int metrics_port,
                   int heartbeat_timeout_ms, const std::string& start_file) {
  InitProcess();
  std::unique_ptr<metrics::MetricsServer> metrics_endpoint =
      StartMetricsEndpoint(metrics_port, "127.0.0.1");
  DemoOptions options;
  (training ? options.trainers : options.rankers) = threads;
  if (spec.tables.empty()) Fail("cluster", Status(StatusCode::kInvalidArgument, "no tables"));
  options.dim = spec.tables[0].dim;
  PsClientOptions client_options;
  client_options.transport = scheme;
  if (heartbeat_timeout_ms > 0) {
    // The interval keeps the default's ratio (100 ms for 500): five heartbeats before a silent
    // connection is dead. At 100 ms under a 5 s timeout, the paper cluster's workers sent ~10,000
    // heartbeats a second, far more messages than their requests.
    client_options.rpc.heartbeat_timeout = std::chrono::milliseconds(heartbeat_timeout_ms);
    client_options.rpc.heartbeat_interval =
        std::max(client_options.rpc.heartbeat_interval, client_options.rpc.heartbeat_timeout / 5);
  }
  // One transport for every RPC client (48 I/O threads for 16 shards of 2 otherwise); ours, its
  // engines can also be exported.
  Result<std::unique_ptr<Transport>> created =
      CreateSharedClientTransport(spec, scheme, &client_options);
  if (!created.ok()) Fail("client transport", created.status());
  std::unique_ptr<Transport> transport = std::move(created).value();
  const char* command = training ? "bx ps train" : "bx ps rank";
  // Without a start file, a cluster that is not there ends the run at once, in one line: not
  // after the whole duration, every request failed. With one, the warm-up below waits for it.
  if (start_file.empty()) {
    if (Status s = CheckShardsReachable(spec, *transport, 3s); !s.ok()) {
      std::fprintf(stderr, "%s: %s\n", command, s.ToString().c_str());
      throw CLI::RuntimeError(1);
    }
  }
  // The run's errors (the library's and failed requests'), each kind once a second.
  RateLimitedStderrLog log;
  Result<std::unique_ptr<PsClient>> client = PsClient::Create(spec, client_options);
  if (!client.ok()) Fail("client", client.status());
  observe::Exports exports;  // destroyed before the client and the transport
  if (metrics_port >= 0) {
    exports.Add(observe::ExportPsClient(**client, {{"transport", scheme}}));
    if (scheme == "rdma") {
      if (Status st = exports.Add(observe::ExportRdmaTransport(
              *transport, {{"transport", scheme}, {"role", "client"}}));
          !st.ok()) {
        Fail("export", st);
      }
    }
  }
  // The workloads use table kTable; a cluster file's first table must have that id.
  if (spec.tables[0].id != kTable) {
    Fail("cluster", Status(StatusCode::kInvalidArgument, "the first table must have id 1"));
  }
  // With a start file (many processes started together, tools/paper_cluster.sh), connections
  // first, so that set-up is not measured: one fetch with a key on every shard (a fetch stores
  // no row), retried while the cluster settles; the line below says when this process could
  // reach all of them. Without one, the check above has failed the run already when a shard
  // could not be reached.
  if (!start_file.empty()) {
    const auto start = Clock::now();
    std::vector<uint64_t> warm;
    std::vector<bool> covered(spec.shards.size(), false);
    size_t left = spec.shards.size();
    for (uint64_t key = 0; left > 0; ++key) {
      const uint32_t shard = ps::ShardOfKey(key, uint32_t(spec.shards.size()));
      if (covered[shard]) continue;
      covered[shard] = true;
      --left;
      warm.push_back(key);
    }
    // Retried: a cluster that is still settling (a primary taking its lease, a backup joining)
    // refuses for a while.
    Result<ps::FetchResult> r = (*client)->Fetch(kTable, warm, 10s);
    while (!r.ok() && Clock::now() - start < 300s) {
      std::this_thread::sleep_for(200ms);
      r = (*client)->Fetch(kTable, warm, 10s);
    }
    if (!r.ok()) Fail(scheme + " warm-up fetch", r.status());
    // With the wall clock (Unix ms), so that a script can line it up with the processes it
    // started.
    std::fprintf(stderr, "connected: a fetch from all %zu shards answered after %.0f ms, at %lld\n",
                 spec.shards.size(),
                 std::chrono::duration<double, std::milli>(Clock::now() - start).count(),
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count()));
  }
  const DrawnRequests drawn = training ? DrawnRequests{} : DrawInferenceRequests(options);
  // Many processes start their clocks together: each waits for the file its starter creates once
  // all are connected.
  if (!start_file.empty()) {
    while (!std::filesystem::exists(start_file)) std::this_thread::sleep_for(10ms);
  }
  Recorder recorder;
  recorder.error_log = &log.limiter();
  const HostCpuMeter cpu;
  auto t0 = Clock::now();
  uint64_t compute_ns = 0;
  {
    Progress progress(scheme + (training ? " training" : " inference"), seconds, recorder);
    if (training) {
      compute_ns = RunTraining(options, **client, seconds, recorder).cpu_ns;
    } else {
      RunInference(options, **client, seconds, drawn, recorder);
    }
  }
  Figures f = FiguresOf(recorder, std::chrono::duration<double>(Clock::now() - t0).count());
  cpu.Fill(compute_ns, f);
  ps::PsClientStats stats = (*client)->stats();
  f.fallbacks = stats.rpc.fallbacks_to_tcp;
  f.rpc_retries = stats.rpc.retries;
  nlohmann::json j = ToJson(f);
  j["push_failovers"] = stats.push_failovers;
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (auto& [key, value] : j.items())
      std::printf("%-26s %s\n", key.c_str(), value.dump().c_str());
  }
  if (f.errors > 0) throw CLI::RuntimeError(1);
}

void AddDemoCommand(CLI::App* app) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* command = app->add_subcommand(
      "demo", "A parameter-server cluster in this process: inference and training, RDMA vs TCP");
  command->add_option("--duration", options->duration_s, "Total seconds (4 runs share it)");
  command->add_option("--rankers", options->rankers, "Ranker threads");
  command->add_option("--outstanding", options->outstanding, "Fetch fan-outs in flight per ranker");
  command
      ->add_option("--inference-rate", options->inference_rate,
                   "Fan-out fetches per second the rankers start together (Poisson; the same "
                   "offered load over both transports); 0: closed loop, --outstanding each")
      ->check(CLI::NonNegativeNumber);
  command->add_flag("!--refill-from-ranker", options->refill_from_completion,
                    "closed loop: the ranker thread starts the next fetch once woken (default: "
                    "the completed fetch's callback does, so --outstanding stay in flight)");
  command->add_option("--trainers", options->trainers, "Trainer threads");
  command->add_option("--compute-us", options->compute_us, "Stand-in compute per training step");
  command->add_flag("--busy", options->busy,
                    "A busy training host: each step's compute is a float matrix multiply "
                    "calibrated to --compute-us, and one thread per core runs it throughout");
  command
      ->add_option("--keys", options->key_space,
                   "Keys the workloads draw from (Zipf), each loaded before the clock starts")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  command->add_option("--shards", options->shards, "Shards");
  command->add_option("--replicas", options->replicas, "Replicas per shard");
  command->add_flag("!--own-io-threads", options->share_io_threads,
                    "rdma: each server and client transport starts its own I/O thread (default: "
                    "all share one, as they share a NIC)");
  command->add_flag("--json", options->json, "Print JSON instead of the tables");
  command
      ->add_option("--metrics-port", options->metrics_port,
                   "Serve Prometheus /metrics on 127.0.0.1:PORT (0: any free port)")
      ->check(CLI::Range(0, 65535));
  command->callback([options] { RunDemo(*options); });
}

}  // namespace bx::tools
