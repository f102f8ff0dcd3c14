// `bx bench msg`: message round-trip latency, one-way throughput and host CPU per message, per
// transport, in one process (a server and a client transport, each with its own I/O threads, as
// two processes would have; --share-io-threads puts both on the process's shared rdma threads),
// or between two: `bx bench msg --serve rdma://127.0.0.1:7000` in one, `--connect` to its URL in
// the other (bench_msg_server.h), as perftest and UCX's ucx_perftest run.
// --polling both runs rdma twice, with adaptive and with fixed polling (rows rdma, rdma-fixed).
//
// Latency: one message in flight, echoed by the server; the client's on_message handler sends the
// next one at once, so the time is the transport's alone (no application thread hand-off), as in
// `sockperf ping-pong`. Throughput: the main thread sends as fast as the transport takes messages,
// with a bounded window of unacknowledged sends, and the clock stops when the server has them all.
// Host CPU per message: the process's CPU time over the throughput run, minus the simnic's
// "hardware" threads (bxsim_hardware_cpu_ns), divided by the messages; it covers both ends (with
// --connect, the server process reports its share when the run ends).
// --rounds N repeats every transport and size N times, interleaved (round 1 runs them all, then
// round 2 ...), so that each round's RDMA/TCP ratio compares runs minutes apart at most; the
// ratios reported are the median of the rounds' with their range, since on a shared host one
// run's CPU per message moves by a third from minute to minute.
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "base/percentile.h"
#include "bench_common.h"
#include "bench_msg_server.h"
#include "bx/buffer.h"
#include "bx/transport.h"
#include "commands.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/transport_registry.h"
#include "verbs/verbs.h"

namespace bx::tools {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchMsgOptions {
  std::string transport = "tcp";
  std::vector<std::string> connect;  // servers in other processes (--connect); empty: in this one
  std::vector<std::string> serve;    // --serve: listen on these until SIGINT/SIGTERM
  std::vector<size_t> sizes;         // empty: kDefaultSizes
  bool json = false;
  int iterations = 0;  // round trips per size; 0: chosen by size
  int messages = 0;    // one-way messages per size; 0: chosen by size
  int io_threads = 1;
  int rounds = 1;  // every transport and size this many times, interleaved
  std::string device;
  RdmaPollingChoice rdma;  // --polling, --share-io-threads
  // rdma: the per-QP send window (RdmaOptions::send_window_bytes; 0: unlimited).
  uint64_t send_window_bytes = RdmaOptions{}.send_window_bytes;
  // rdma: RdmaOptions::rendezvous_ahead_bytes (0: each rendezvous waits for the one before).
  uint64_t rendezvous_ahead_bytes = RdmaOptions{}.rendezvous_ahead_bytes;
  // rdma: receive buffers per QP, also the sender's credits (RdmaOptions::recv_queue_depth).
  uint32_t recv_queue_depth = RdmaOptions{}.recv_queue_depth;
  bool adaptive_polling = true;  // this run's rdma polling (from rdma.polling)
};

const std::vector<size_t> kDefaultSizes = {8, 4096, 64 << 10, 1 << 20};

// Round trips: 20000 for small messages (p999 from 20 samples), fewer as they grow so that a
// size takes well under a second, never fewer than 1000 (p999 needs them).
int LatencyIterations(const BenchMsgOptions& options, size_t size) {
  if (options.iterations > 0) return options.iterations;
  return static_cast<int>(
      std::clamp<size_t>((size_t{256} << 20) / std::max<size_t>(size, 1), 1000, 20000));
}
// One-way messages: 2 GiB worth, between 2000 and 500000.
int ThroughputMessages(const BenchMsgOptions& options, size_t size) {
  if (options.messages > 0) return options.messages;
  return static_cast<int>(
      std::clamp<size_t>((size_t{2} << 30) / std::max<size_t>(size, 1), 2000, 500000));
}

struct MsgResult {
  std::string transport;
  size_t size = 0;
  int round = 1;
  double p50_us = 0, p99_us = 0, p999_us = 0;
  double msgs_per_sec = 0, gbytes_per_sec = 0;
  double host_cpu_ns_per_msg = 0;
  std::map<std::string, uint64_t> counters;
};

// Where a measurement's client connects: a server started for it in this process, or one in
// another process (--connect). The client goes first, then the server.
struct Peer {
  std::unique_ptr<BenchMsgServer> local;  // null with --connect
  std::unique_ptr<Transport> client;
  std::string url;
  ~Peer() {
    client.reset();
    local.reset();
  }
};

// The I/O-thread loop counters of this process's rdma:// transports of `peer`.
IoThreadCounters LoopCounters(Peer& peer) {
  IoThreadCounters sum;
  for (Transport* t : {peer.local ? &peer.local->transport() : nullptr, peer.client.get()}) {
    if (t == nullptr) continue;
    if (auto info = rdma::GetRdmaTransportInfo(*t); info.ok()) sum += info->io_loop;
  }
  return sum;
}

// Adds what the loops did per message between `before` and `after` to `counters`.
void AddLoopCounters(const IoThreadCounters& before, const IoThreadCounters& after,
                     uint64_t messages, std::map<std::string, uint64_t>& counters) {
  const auto b = before.ToMap();
  for (const auto& [key, value] : after.ToMap()) counters[key] = value - b.at(key);
  counters["messages"] = messages;
}

TransportOptions MakeTransportOptions(const BenchMsgOptions& options) {
  TransportOptions transport_options;
  transport_options.io_threads = options.io_threads;
  transport_options.device = options.device;
  transport_options.rdma.adaptive_polling = options.adaptive_polling;
  transport_options.rdma.share_io_threads = options.rdma.share_io_threads;
  transport_options.rdma.send_window_bytes = options.send_window_bytes;
  transport_options.rdma.rendezvous_ahead_bytes = options.rendezvous_ahead_bytes;
  transport_options.rdma.recv_queue_depth = options.recv_queue_depth;
  return transport_options;
}

// `target`: a scheme (a server in this process) or, with --connect, the remote server's URL.
Result<std::unique_ptr<Peer>> MakePeer(const std::string& target, const BenchMsgOptions& options) {
  const TransportOptions transport_options = MakeTransportOptions(options);
  auto peer = std::make_unique<Peer>();
  std::string scheme = target;
  if (!options.connect.empty()) {
    BX_ASSIGN_OR_RETURN(Url url, ParseUrl(target));
    scheme = url.scheme;
    peer->url = target;
  } else {
    BX_ASSIGN_OR_RETURN(peer->local,
                        BenchMsgServer::Start(scheme + "://127.0.0.1:0", transport_options));
    peer->url = peer->local->url();
  }
  BX_ASSIGN_OR_RETURN(peer->client, CreateTransport(scheme, transport_options));
  return peer;
}

// Connects to the peer's server and opens the socket as `mode` ("echo" or "sink N"): returns once
// the server has answered "ready"; `on_message` gets every message after that.
Result<std::shared_ptr<Socket>> Open(Peer& peer, const std::string& mode,
                                     std::function<void(Socket&, Buffer)> on_message) {
  struct Opening {
    std::mutex mutex;
    std::condition_variable changed;
    bool ready = false;  // guarded by mutex; the I/O thread reads it without, as only it writes
    std::string refusal;
  };
  auto opening = std::make_shared<Opening>();
  auto route = [opening, on_message = std::move(on_message)](Socket& socket, Buffer message) {
    if (opening->ready) return on_message(socket, std::move(message));
    std::lock_guard<std::mutex> lock(opening->mutex);
    if (MessageText(message) == "ready") {
      opening->ready = true;
    } else {
      opening->refusal = std::string(MessageText(message).substr(0, 64));
    }
    opening->changed.notify_all();
  };
  BX_ASSIGN_OR_RETURN(std::shared_ptr<Socket> socket,
                      peer.client->Connect(peer.url, {route, {}}, std::chrono::seconds(5)));
  BX_ASSIGN_OR_RETURN(Buffer hello, TextMessage(mode));
  socket->Send(std::move(hello));
  std::unique_lock<std::mutex> lock(opening->mutex);
  if (!opening->changed.wait_for(lock, std::chrono::seconds(10),
                                 [&] { return opening->ready || !opening->refusal.empty(); })) {
    return DeadlineExceeded(
        fmt::format("bench msg: {} did not answer \"{}\" within 10 s", peer.url, mode));
  }
  if (!opening->ready) {
    return FailedPrecondition(
        fmt::format("bench msg: {} answered \"{}\" with \"{}\"", peer.url, mode, opening->refusal));
  }
  return socket;
}

Status MeasureLatency(const std::string& target, size_t size, const BenchMsgOptions& options,
                      MsgResult* result) {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<Peer> peer, MakePeer(target, options));
  const int measured = LatencyIterations(options, size);
  const int warmup = std::max(100, measured / 10);
  const int total = warmup + measured;

  std::vector<double> rtt_us;
  rtt_us.reserve(total);
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  Clock::time_point sent_at;
  // Runs on the client's I/O thread: one message in flight, resent as soon as it comes back.
  auto on_echo = [&](Socket& socket, Buffer message) {
    Clock::time_point now = Clock::now();
    rtt_us.push_back(std::chrono::duration<double, std::micro>(now - sent_at).count());
    if (static_cast<int>(rtt_us.size()) < total) {
      sent_at = Clock::now();
      socket.Send(std::move(message));
      return;
    }
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
    finished.notify_all();
  };
  BX_ASSIGN_OR_RETURN(std::shared_ptr<Socket> socket, Open(*peer, "echo", on_echo));
  BX_ASSIGN_OR_RETURN(Buffer first, Buffer::Allocate(size));
  sent_at = Clock::now();
  socket->Send(std::move(first));
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!finished.wait_for(lock, std::chrono::seconds(120), [&] { return done; })) {
      return Status(StatusCode::kDeadlineExceeded,
                    fmt::format("{} latency at {} B: {} of {} round trips after 120 s", target,
                                size, rtt_us.size(), total));
    }
  }
  socket->Close();
  std::vector<double> measured_us(rtt_us.begin() + warmup, rtt_us.end());
  result->p50_us = Percentile(measured_us, 0.50);
  result->p99_us = Percentile(measured_us, 0.99);
  result->p999_us = Percentile(measured_us, 0.999);
  return Status::Ok();
}

Status MeasureThroughput(const std::string& target, size_t size, const BenchMsgOptions& options,
                         MsgResult* result) {
  const uint64_t total = ThroughputMessages(options, size);
  BX_ASSIGN_OR_RETURN(std::unique_ptr<Peer> peer, MakePeer(target, options));
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<Result<SinkDone>> done;  // guarded by mutex: the server's answer once all arrived
  BX_ASSIGN_OR_RETURN(std::shared_ptr<Socket> socket,
                      Open(*peer, fmt::format("sink {}", total), [&](Socket&, Buffer message) {
                        std::lock_guard<std::mutex> lock(mutex);
                        done = ParseSinkDone(MessageText(message));
                        changed.notify_all();
                      }));

  // Completions come in send order, so a callback on every kSignalEvery-th message acknowledges
  // all before it (as selective signalling does on a QP); the window bounds unacknowledged
  // batches to 32 MiB, well under max_queued_bytes, so no send is ever refused.
  constexpr uint64_t kSignalEvery = 16;
  const uint64_t window_batches =
      std::clamp<uint64_t>((size_t{32} << 20) / (size * kSignalEvery), 2, 256);
  uint64_t acknowledged_batches = 0;  // guarded by mutex
  Status send_error;                  // guarded by mutex
  auto on_batch_sent = [&](const Status& status) {
    std::lock_guard<std::mutex> lock(mutex);
    ++acknowledged_batches;
    if (!status.ok() && send_error.ok()) send_error = status;
    changed.notify_all();
  };

  const IoThreadCounters loop_before = LoopCounters(*peer);
  uint64_t cpu_before = ProcessCpuNs();
  uint64_t hardware_before = HardwareCpuNs();
  Clock::time_point start = Clock::now();
  for (uint64_t i = 0; i < total; ++i) {
    bool signalled = (i + 1) % kSignalEvery == 0 || i + 1 == total;
    if (signalled) {
      uint64_t batch = i / kSignalEvery;
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return batch < acknowledged_batches + window_batches; });
      if (!send_error.ok()) return send_error;
    }
    BX_ASSIGN_OR_RETURN(Buffer message, Buffer::Allocate(size));
    socket->Send(std::move(message), signalled ? SendCallback(on_batch_sent) : nullptr);
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!changed.wait_for(lock, std::chrono::seconds(120), [&] { return done.has_value(); })) {
      return Status(StatusCode::kDeadlineExceeded,
                    fmt::format("{} throughput at {} B: the server had not all {} messages after "
                                "120 s",
                                target, size, total));
    }
    if (!send_error.ok()) return send_error;
    if (!done->ok()) return done->status();
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  uint64_t cpu_ns = ProcessCpuNs() - cpu_before;
  uint64_t hardware_ns = HardwareCpuNs() - hardware_before;
  result->msgs_per_sec = total / seconds;
  result->gbytes_per_sec = total * static_cast<double>(size) / seconds / 1e9;
  uint64_t host_ns = cpu_ns - std::min(cpu_ns, hardware_ns);
  if (!peer->local) {  // the server's process: its share, as it measured it
    const SinkDone& server = **done;
    host_ns += server.cpu_ns - std::min(server.cpu_ns, server.hardware_ns);
  }
  result->host_cpu_ns_per_msg = static_cast<double>(host_ns) / static_cast<double>(total);
  result->counters = socket->counters();
  if (peer->client->scheme() == "rdma") {
    AddLoopCounters(loop_before, LoopCounters(*peer), total, result->counters);
  }
  if (peer->local) {
    for (auto& [name, value] : peer->local->last_sink_counters()) {
      result->counters["receiver_" + name] = value;
    }
  }
  socket->Close();
  return Status::Ok();
}

json ToJson(const MsgResult& r) {
  return {{"transport", r.transport},
          {"size", r.size},
          {"round", r.round},
          {"p50_us", r.p50_us},
          {"p99_us", r.p99_us},
          {"p999_us", r.p999_us},
          {"msgs_per_sec", r.msgs_per_sec},
          {"gbytes_per_sec", r.gbytes_per_sec},
          {"host_cpu_ns_per_msg", r.host_cpu_ns_per_msg},
          {"counters", r.counters}};
}

void PrintTable(const std::vector<MsgResult>& results) {
  fmt::print("{:<10} {:>5} {:>9} {:>9} {:>9} {:>9} {:>12} {:>8} {:>12}\n", "transport", "round",
             "size", "p50_us", "p99_us", "p999_us", "msgs/s", "GB/s", "host_ns/msg");
  for (const MsgResult& r : results) {
    fmt::print("{:<10} {:>5} {:>9} {:>9.1f} {:>9.1f} {:>9.1f} {:>12.0f} {:>8.3f} {:>12.0f}\n",
               r.transport, r.round, r.size, r.p50_us, r.p99_us, r.p999_us, r.msgs_per_sec,
               r.gbytes_per_sec, r.host_cpu_ns_per_msg);
  }
}

const char* const kRatioFields[] = {"p50", "p99", "p999", "msgs_per_sec", "host_cpu_ns_per_msg"};

// RDMA/TCP for each size and round both ran in: below 1 is better for latency and CPU, above 1
// for rates.
json RoundRatios(const std::vector<MsgResult>& results) {
  json ratios = json::array();
  for (const MsgResult& rdma : results) {
    if (rdma.transport != "rdma") continue;
    for (const MsgResult& tcp : results) {
      if (tcp.transport != "tcp" || tcp.size != rdma.size || tcp.round != rdma.round) continue;
      auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
      ratios.push_back(
          {{"size", rdma.size},
           {"round", rdma.round},
           {"p50", ratio(rdma.p50_us, tcp.p50_us)},
           {"p99", ratio(rdma.p99_us, tcp.p99_us)},
           {"p999", ratio(rdma.p999_us, tcp.p999_us)},
           {"msgs_per_sec", ratio(rdma.msgs_per_sec, tcp.msgs_per_sec)},
           {"host_cpu_ns_per_msg", ratio(rdma.host_cpu_ns_per_msg, tcp.host_cpu_ns_per_msg)}});
    }
  }
  return ratios;
}

// Per size, each ratio's median over the rounds (the lower middle one for an even count, so that
// it is always a round's own figure), with "range": [smallest, largest] for each field.
json MedianRatios(const json& round_ratios, const std::vector<size_t>& sizes) {
  json medians = json::array();
  for (size_t size : sizes) {
    json median = {{"size", size}, {"rounds", 0}, {"range", json::object()}};
    for (const char* field : kRatioFields) {
      std::vector<double> values;
      for (const json& r : round_ratios) {
        if (r["size"].get<size_t>() == size) values.push_back(r[field].get<double>());
      }
      if (values.empty()) break;
      std::sort(values.begin(), values.end());
      median["rounds"] = values.size();
      median[field] = values[(values.size() - 1) / 2];
      median["range"][field] = {values.front(), values.back()};
    }
    if (median["rounds"].get<size_t>() > 0) medians.push_back(std::move(median));
  }
  return medians;
}

void RunBenchMsg(const BenchMsgOptions& options) {
  Status pool = EnsureMemoryPool(options.device);
  if (!pool.ok()) {
    fmt::print(stderr, "bx bench msg: {}\n", pool.ToString());
    throw CLI::RuntimeError(1);
  }
  // After bx::Init, which registers the transports. Each run's scheme, and what MakePeer takes.
  std::vector<std::pair<std::string, std::string>> targets;
  if (!options.connect.empty()) {
    for (const std::string& url : options.connect) {
      Result<Url> parsed = ParseUrl(url);
      if (!parsed.ok()) {
        fmt::print(stderr, "bx bench msg: --connect {}: {}\n", url, parsed.status().ToString());
        throw CLI::RuntimeError(1);
      }
      targets.emplace_back(parsed->scheme, url);
    }
  } else {
    for (const std::string& scheme : options.transport == "all"
                                         ? transport::RegisteredTransports()
                                         : std::vector<std::string>{options.transport}) {
      targets.emplace_back(scheme, scheme);
    }
  }
  std::vector<std::string> schemes;
  for (const auto& target : targets) schemes.push_back(target.first);
  const std::vector<size_t>& sizes = options.sizes.empty() ? kDefaultSizes : options.sizes;
  std::vector<MsgResult> results;
  for (int round = 1; round <= options.rounds; ++round) {
    for (const auto& [scheme, target] : targets) {
      for (const auto& [label, adaptive] : PollingRuns(scheme, options.rdma)) {
        BenchMsgOptions run = options;
        run.adaptive_polling = adaptive;
        for (size_t size : sizes) {
          MsgResult result;
          result.transport = label;
          result.size = size;
          result.round = round;
          Status status = MeasureLatency(target, size, run, &result);
          if (status.ok()) status = MeasureThroughput(target, size, run, &result);
          if (!status.ok()) {
            fmt::print(stderr, "bx bench msg: {} at {} B (round {}): {}\n", result.transport, size,
                       round, status.ToString());
            throw CLI::RuntimeError(1);
          }
          results.push_back(std::move(result));
        }
      }
    }
  }
  json round_ratios = RoundRatios(results);
  json ratios = MedianRatios(round_ratios, sizes);
  if (options.json) {
    json out = {{"results", json::array()},
                {"rounds", options.rounds},
                {"processes", options.connect.empty() ? 1 : 2}};
    for (const MsgResult& r : results) out["results"].push_back(ToJson(r));
    if (!ratios.empty()) {
      out["ratios_rdma_over_tcp"] = ratios;
      out["ratios_by_round"] = round_ratios;
    }
    fmt::print("{}\n", out.dump(2));
    return;
  }
  PrintTable(results);
  if (options.transport == "all" && ratios.empty()) {
    fmt::print("\n(no ratios: this bx has only {})\n", fmt::join(schemes, ", "));
  }
  if (ratios.empty()) return;
  fmt::print("\nRDMA/TCP  {:>9} {:>9} {:>9} {:>9} {:>12} {:>12}\n", "size", "p50", "p99", "p999",
             "msgs/s", "host_ns/msg");
  for (const json& r : ratios) {
    fmt::print("          {:>9} {:>9.2f} {:>9.2f} {:>9.2f} {:>12.2f} {:>12.2f}\n",
               r["size"].get<size_t>(), r["p50"].get<double>(), r["p99"].get<double>(),
               r["p999"].get<double>(), r["msgs_per_sec"].get<double>(),
               r["host_cpu_ns_per_msg"].get<double>());
  }
  if (options.rounds == 1) return;
  fmt::print("(each the median of {} rounds; the rounds' range:)\n", options.rounds);
  for (const json& r : ratios) {
    std::string line = fmt::format("          {:>9}", r["size"].get<size_t>());
    for (const char* field : kRatioFields) {
      const json& range = r["range"][field];
      line += fmt::format(" {:>4.2f}-{:<4.2f}", range[0].get<double>(), range[1].get<double>());
    }
    fmt::print("{}\n", line);
  }
}

// --serve: a BenchMsgServer per URL until SIGINT or SIGTERM; prints "serving URL" for each
// (port 0 becomes the one taken) once it listens.
void ServeBenchMsg(const BenchMsgOptions& options) {
  // Blocked before any I/O thread starts, so that every thread inherits it and sigwait here
  // takes the signal.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  Status pool = EnsureMemoryPool(options.device);
  std::vector<std::unique_ptr<BenchMsgServer>> servers;
  for (const std::string& url : options.serve) {
    if (!pool.ok()) break;
    Result<std::unique_ptr<BenchMsgServer>> server =
        BenchMsgServer::Start(url, MakeTransportOptions(options));
    if (!server.ok()) {
      pool = server.status();
      break;
    }
    fmt::print("serving {}\n", (*server)->url());
    std::fflush(stdout);
    servers.push_back(std::move(*server));
  }
  if (!pool.ok()) {
    fmt::print(stderr, "bx bench msg --serve: {}\n", pool.ToString());
    throw CLI::RuntimeError(1);
  }
  int signal_number = 0;
  sigwait(&stop, &signal_number);
}

}  // namespace

Result<double> MeasureTcpHostCpuNsPerMessage(size_t size, int messages) {
  BX_RETURN_IF_ERROR(EnsureMemoryPool(""));
  BenchMsgOptions options;
  options.messages = messages;
  MsgResult result;
  BX_RETURN_IF_ERROR(MeasureThroughput("tcp", size, options, &result));
  return result.host_cpu_ns_per_msg;
}

void AddBenchMsgCommand(CLI::App* bench) {
  auto options = std::make_shared<BenchMsgOptions>();
  CLI::App* command = bench->add_subcommand(
      "msg", "Round-trip latency, one-way throughput and host CPU per message, per transport");
  command->add_option("--transport", options->transport, "tcp, rdma or all (side by side)")
      ->check(CLI::IsMember({"tcp", "rdma", "all"}));
  CLI::Option* serve =
      command->add_option("--serve", options->serve,
                          "Be the server for clients in other processes, on this URL "
                          "(repeatable, e.g. rdma://127.0.0.1:7000), until SIGINT/SIGTERM");
  command
      ->add_option("--connect", options->connect,
                   "Measure against a --serve process at this URL instead of a server in this "
                   "process (repeatable: one row set per URL, ratios when rdma and tcp)")
      ->excludes(serve);
  command
      ->add_option("--size", options->sizes,
                   "Message size, repeatable, e.g. 8 4KB 64KB 1MB (default: all four)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/false));
  command->add_option("--iterations", options->iterations,
                      "Round trips per size (default: 1000-20000 by size)");
  command->add_option("--messages", options->messages,
                      "One-way messages per size (default: 2 GiB worth, 2000-500000)");
  command->add_option("--io-threads", options->io_threads, "I/O threads per transport");
  command
      ->add_option("--rounds", options->rounds,
                   "Run every transport and size this many times, interleaved; ratios are the "
                   "rounds' median, with their range")
      ->check(CLI::Range(1, 50));
  AddRdmaPollingOptions(command, &options->rdma);
  command
      ->add_option("--send-window", options->send_window_bytes,
                   "rdma: bytes posted and not yet completed per QP, e.g. 1MB (0: unlimited; "
                   "default 128KB, the paper's bound for incasts)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/false));
  command
      ->add_option("--rendezvous-ahead", options->rendezvous_ahead_bytes,
                   "rdma: bytes of queued rendezvous messages whose requests go ahead of their "
                   "turn, per QP, e.g. 256KB (0: none; default 1MB)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/false));
  command
      ->add_option("--recv-queue-depth", options->recv_queue_depth,
                   "rdma: receive buffers posted per QP, the sender's credits (default 64)")
      ->check(CLI::Range(2, 4096));
  command->add_option("--device", options->device,
                      "RDMA device (default: BX_DEVICE or the first); bemalloc registers with it");
  command->add_flag("--json", options->json, "Print JSON instead of the table");
  command->callback([options] {
    if (!options->serve.empty()) return ServeBenchMsg(*options);
    RunBenchMsg(*options);
  });
}

}  // namespace bx::tools
