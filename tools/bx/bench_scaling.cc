// `bx bench fanout` and `bx bench incast`: the scaling mechanisms of paper section 6 measured on
// the simnic, in one process (server and client transports, each with its own I/O threads).
//
// fanout: N logical sockets spread over D destinations (D listeners), all sending at once. With
// QP multiplexing the client needs D engines, not N. Reports QPs, memory per socket (resident
// memory grown while the sockets were set up, both ends, over N), messages per second, p99
// one-way latency (send call to delivery at the server, same clock), and the largest outstanding
// byte count any engine reached.
//
// incast: N senders, each on its own engine, stream large messages to one receiver through a
// simnic port modelled as a 25 Gb/s link, once with the send window and once without (or as
// --window says). Latency is send call to delivery; the window trades queueing in the NIC for
// queueing in software, and bounds what each engine has in flight (max_outstanding_bytes).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "alloc/verbs_registrar.h"
#include "base/percentile.h"
#include "base/wire_encoding.h"
#include "bench_common.h"
#include "bx/transport.h"
#include "commands.h"
#include "transport/rdma/rdma_transport.h"

namespace bx::tools {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

size_t ResidentBytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return size_t(resident) * size_t(sysconf(_SC_PAGESIZE));
}

uint64_t NowNs() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

// Collects one-way latencies: each message starts with its send time.
struct Receiver {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<double> latencies_us;
  uint64_t expected = 0;

  SocketHandlers Handlers() {
    SocketHandlers h;
    h.on_message = [this](Socket&, Buffer m) {
      uint64_t sent = 0;
      WireReader(std::span<const std::byte>(m.data(), m.size())).GetU64(&sent);
      double us = double(NowNs() - sent) / 1000.0;
      std::lock_guard lock(mu);
      latencies_us.push_back(us);
      if (latencies_us.size() == expected) cv.notify_all();
    };
    return h;
  }
  bool Wait(std::chrono::seconds timeout) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, timeout, [&] { return latencies_us.size() >= expected; });
  }
};

Buffer Stamped(size_t size) {
  Buffer b = std::move(Buffer::Allocate(std::max<size_t>(size, 8))).value();
  std::memset(b.data(), 0x5a, b.size());
  WireWriter(std::span<std::byte>(b.data(), b.size())).PutU64(NowNs());
  return b;
}

[[noreturn]] void Fail(const char* command, const Status& status) {
  fmt::print(stderr, "bx bench {}: {}\n", command, status.ToString());
  throw CLI::RuntimeError(1);
}

std::unique_ptr<Transport> MakeRdma(const char* command, const RdmaOptions& rdma) {
  TransportOptions options;
  options.rdma = rdma;
  auto t = rdma::CreateRdmaTransport(options);
  if (!t.ok()) Fail(command, t.status());
  return std::move(t).value();
}

// The largest max_outstanding_bytes over `transport`'s engines, and their count.
std::pair<uint64_t, size_t> EngineMax(Transport& transport, const char* key) {
  auto info = rdma::GetRdmaTransportInfo(transport);
  uint64_t most = 0;
  if (!info.ok()) return {0, 0};
  for (auto& e : info->engines) most = std::max(most, e.counters[key]);
  return {most, info->engines.size()};
}

struct FanoutOptions {
  int sockets = 1000;
  int destinations = 4;
  int messages = 10;  // per socket
  size_t size = 1024;
  bool json = false;
};

void RunFanout(const FanoutOptions& o) {
  if (Status s = EnsureMemoryPool(""); !s.ok()) Fail("fanout", s);
  if (o.sockets < 1 || o.destinations < 1)
    Fail("fanout", InvalidArgument("need sockets, destinations >= 1"));
  RdmaOptions options;
  auto server = MakeRdma("fanout", options);
  auto client = MakeRdma("fanout", options);
  Receiver receiver;
  receiver.expected = uint64_t(o.sockets) * o.messages;
  std::vector<std::unique_ptr<Listener>> listeners;
  for (int d = 0; d < o.destinations; ++d) {
    auto l = server->Listen("rdma://127.0.0.1:0",
                            [&](const std::shared_ptr<Socket>&) { return receiver.Handlers(); });
    if (!l.ok()) Fail("fanout", l.status());
    listeners.push_back(std::move(l).value());
  }
  const size_t rss_before = ResidentBytes();
  std::vector<std::shared_ptr<Socket>> sockets;
  for (int i = 0; i < o.sockets; ++i) {
    auto s = client->Connect(listeners[i % o.destinations]->url(), {}, std::chrono::seconds(10));
    if (!s.ok()) Fail("fanout", s.status());
    sockets.push_back(std::move(s).value());
  }
  const size_t rss_after = ResidentBytes();
  auto start = Clock::now();
  for (int m = 0; m < o.messages; ++m)
    for (auto& s : sockets) s->Send(Stamped(o.size));
  if (!receiver.Wait(std::chrono::seconds(300)))
    Fail("fanout", DeadlineExceeded("messages did not all arrive"));
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  auto [max_outstanding, qps] = EngineMax(*client, "max_outstanding_bytes");
  double p99 = Percentile(receiver.latencies_us, 0.99);
  double p50 = Percentile(receiver.latencies_us, 0.50);
  json out = {
      {"sockets", o.sockets},
      {"destinations", o.destinations},
      {"qps", qps},
      {"server_qps", EngineMax(*server, "max_outstanding_bytes").second},
      {"bytes_per_socket", rss_after > rss_before ? (rss_after - rss_before) / o.sockets : 0},
      {"msgs_per_sec", double(receiver.expected) / seconds},
      {"p50_us", p50},
      {"p99_us", p99},
      {"max_outstanding_bytes", max_outstanding},
      {"window_bytes", options.send_window_bytes},
      {"message_bytes", o.size},
      {"messages", receiver.expected}};
  for (auto& s : sockets) s->Close();
  if (o.json) {
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("{:>8} {:>6} {:>5} {:>10} {:>12} {:>9} {:>9} {:>16} {:>8}\n", "sockets", "dests",
             "qps", "B/socket", "msgs/s", "p50_us", "p99_us", "max_outstanding", "window");
  fmt::print("{:>8} {:>6} {:>5} {:>10} {:>12.0f} {:>9.1f} {:>9.1f} {:>16} {:>8}\n", o.sockets,
             o.destinations, qps, out["bytes_per_socket"].get<size_t>(),
             out["msgs_per_sec"].get<double>(), p50, p99, max_outstanding,
             options.send_window_bytes);
}

struct IncastOptions {
  int senders = 16;
  std::string window;  // empty: on (default W) and off side by side; "off"; or bytes
  int messages = 20;   // per sender
  size_t size = 256 << 10;
  double gbps = 25;
  bool json = false;
};

json RunIncastOnce(const IncastOptions& o, uint64_t window_bytes) {
  RdmaOptions options;
  options.send_window_bytes = window_bytes;
  options.engines_per_destination = o.senders;  // one engine per sender, as N hosts would have
  auto server = MakeRdma("incast", options);
  auto client = MakeRdma("incast", options);
  Receiver receiver;
  receiver.expected = uint64_t(o.senders) * o.messages;
  auto listener = server->Listen(
      "rdma://127.0.0.1:0", [&](const std::shared_ptr<Socket>&) { return receiver.Handlers(); });
  if (!listener.ok()) Fail("incast", listener.status());
  std::vector<std::shared_ptr<Socket>> senders;
  for (int i = 0; i < o.senders; ++i) {
    auto s = client->Connect((*listener)->url(), {}, std::chrono::seconds(10));
    if (!s.ok()) Fail("incast", s.status());
    senders.push_back(std::move(s).value());
  }
  auto start = Clock::now();
  for (int m = 0; m < o.messages; ++m)
    for (auto& s : senders) s->Send(Stamped(o.size));
  if (!receiver.Wait(std::chrono::seconds(300)))
    Fail("incast", DeadlineExceeded("messages did not all arrive"));
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  auto [max_outstanding, engines] = EngineMax(*client, "max_outstanding_bytes");
  auto [stalls, unused] = EngineMax(*client, "window_stalls");
  json out = {{"senders", o.senders},
              {"engines", engines},
              {"window_bytes", window_bytes == 0 ? json(nullptr) : json(window_bytes)},
              {"message_bytes", o.size},
              {"p50_us", Percentile(receiver.latencies_us, 0.50)},
              {"p99_us", Percentile(receiver.latencies_us, 0.99)},
              {"max_outstanding_bytes", max_outstanding},
              {"max_window_stalls_per_engine", stalls},
              {"gbytes_per_sec", double(receiver.expected * o.size) / seconds / 1e9}};
  for (auto& s : senders) s->Close();
  return out;
}

void RunIncast(const IncastOptions& o) {
  if (Status s = EnsureMemoryPool(""); !s.ok()) Fail("incast", s);
  verbs::Device* device = bemalloc::RegisteredDevice();
  auto& sim = device->lib().sim();
  if (sim.set_link_model == nullptr)
    Fail("incast", FailedPrecondition("the link model needs the simnic (BX_VERBS=sim)"));
  // The receiver's port is the bottleneck every sender shares; 2 us one way.
  sim.set_link_model(device->context(), o.gbps, 2000);
  std::vector<uint64_t> windows;
  const uint64_t default_window = RdmaOptions{}.send_window_bytes;
  if (o.window.empty()) {
    windows = {default_window, 0};
  } else if (o.window == "off") {
    windows = {0};
  } else {
    try {
      windows = {std::stoull(o.window)};
    } catch (...) {
      Fail("incast", InvalidArgument("--window takes bytes or 'off', not '" + o.window + "'"));
    }
  }
  json results = json::array();
  for (uint64_t w : windows) results.push_back(RunIncastOnce(o, w));
  sim.set_link_model(device->context(), 0, 0);
  if (o.json) {
    fmt::print("{}\n", json{{"link_gbps", o.gbps}, {"results", results}}.dump(2));
    return;
  }
  fmt::print("{:>8} {:>10} {:>10} {:>10} {:>16} {:>14} {:>8}\n", "senders", "window", "p50_us",
             "p99_us", "max_outstanding", "stalls/engine", "GB/s");
  for (auto& r : results) {
    std::string w =
        r["window_bytes"].is_null() ? "off" : std::to_string(r["window_bytes"].get<uint64_t>());
    fmt::print("{:>8} {:>10} {:>10.0f} {:>10.0f} {:>16} {:>14} {:>8.2f}\n", r["senders"].get<int>(),
               w, r["p50_us"].get<double>(), r["p99_us"].get<double>(),
               r["max_outstanding_bytes"].get<uint64_t>(),
               r["max_window_stalls_per_engine"].get<uint64_t>(),
               r["gbytes_per_sec"].get<double>());
  }
}

}  // namespace

void AddBenchScalingCommands(CLI::App* bench) {
  auto fanout = std::make_shared<FanoutOptions>();
  CLI::App* f = bench->add_subcommand(
      "fanout", "N sockets over D destinations sending at once: QPs, memory, rate, p99");
  f->add_option("--sockets", fanout->sockets, "Logical sockets");
  f->add_option("--destinations", fanout->destinations, "Destinations (listeners)");
  f->add_option("--messages", fanout->messages, "Messages per socket");
  f->add_option("--size", fanout->size, "Message bytes")->transform(CLI::AsSizeValue(false));
  f->add_flag("--json", fanout->json, "Print JSON instead of the table");
  f->callback([fanout] { RunFanout(*fanout); });

  auto incast = std::make_shared<IncastOptions>();
  CLI::App* i = bench->add_subcommand(
      "incast", "N senders to one receiver over a modelled link, send window on and off");
  i->add_option("--senders", incast->senders, "Senders, each on its own engine");
  i->add_option("--window", incast->window, "Window bytes or 'off' (default: both, side by side)");
  i->add_option("--messages", incast->messages, "Messages per sender");
  i->add_option("--size", incast->size, "Message bytes")->transform(CLI::AsSizeValue(false));
  i->add_option("--gbps", incast->gbps, "Modelled link rate");
  i->add_flag("--json", incast->json, "Print JSON instead of the table");
  i->callback([incast] { RunIncast(*incast); });
}

}  // namespace bx::tools
