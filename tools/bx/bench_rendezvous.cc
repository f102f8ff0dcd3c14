// `bx bench rendezvous [--json]`: the cost of scoped remote writes per rendezvous.
//
// Two engines over the simnic (each with its own I/O thread, as the RDMA transport runs them)
// exchange N rendezvous messages of 64 KiB and of 1 MiB, once with EngineConfig::
// scoped_remote_writes on (a memory window bound per destination before the reply, invalidated
// before delivery) and once off (the region rkey), side by side:
//   one at a time   send, wait for delivery, send the next: the latency a window adds to one
//                   message (bind ahead of the reply, invalidate before delivery)
//   back to back    N messages queued at once on one channel: the throughput cost
// Each cell is the median of --reps runs, in microseconds per rendezvous; the ratio is on/off.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "alloc/verbs_registrar.h"
#include "base/percentile.h"
#include "bench_common.h"
#include "commands.h"
#include "engine/engine.h"
#include "engine/engine_poller.h"
#include "verbs/rc_connect.h"

namespace bx::tools {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct End {
  std::shared_ptr<IoThread> io;
  engine::EnginePoller& poller() { return engine::EnginePoller::Of(*io); }
  std::optional<verbs::RcQueuePair> qp;
  std::unique_ptr<engine::Engine> engine;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t received = 0;
  std::optional<Status> failure;
};

// One engine pair, a -> b, on `device`; a sends on channel 0.
class EnginePair {
 public:
  Status Build(verbs::Device& device, const engine::EngineConfig& config) {
    verbs::Library& lib = device.lib();
    for (End* e : {&a_, &b_}) {
      BX_ASSIGN_OR_RETURN(e->io, engine::EnginePoller::StartThread(lib, device.context(), nullptr,
                                                                   IoThreadOptions{}));
      verbs::QueuePairAttrs attrs;
      attrs.max_send_wr = config.send_queue_depth;
      attrs.max_recv_wr = config.recv_queue_depth;
      attrs.max_inline_data = 64;
      BX_ASSIGN_OR_RETURN(
          verbs::RcQueuePair qp,
          verbs::CreateRcQueuePair(lib, device.context(), device.pd(), attrs, e->poller().cq()));
      e->qp.emplace(std::move(qp));
      BX_RETURN_IF_ERROR(verbs::MoveRcToInit(lib, e->qp->qp(), 1, verbs::RcOptions{}));
      engine::Engine::Callbacks cb;
      cb.on_message = [e](engine::ChannelId, Buffer) {
        std::lock_guard lock(e->mu);
        ++e->received;
        e->cv.notify_all();
      };
      cb.on_failure = [e](const Status& why) {
        std::lock_guard lock(e->mu);
        e->failure = why;
        e->cv.notify_all();
      };
      e->engine = std::make_unique<engine::Engine>(lib, e->qp->qp(), config, cb);
      BX_RETURN_IF_ERROR(e->engine->PostInitialReceives());
      e->engine->SetPeer({config.recv_queue_depth, config.eager_limit, config.max_message_bytes});
    }
    verbs::RcOptions rc;
    rc.mtu = IBV_MTU_4096;
    ibv_gid gid = device.gid();
    BX_RETURN_IF_ERROR(verbs::MoveRcToRts(lib, a_.qp->qp(), 1, b_.qp->qp_num(), gid, rc));
    BX_RETURN_IF_ERROR(verbs::MoveRcToRts(lib, b_.qp->qp(), 1, a_.qp->qp_num(), gid, rc));
    for (End* e : {&a_, &b_}) e->io->RunAndWait([e] { e->poller().AddEngine(e->engine.get()); });
    Status opened;
    a_.io->RunAndWait([&] { opened = a_.engine->OpenChannel(0); });
    BX_RETURN_IF_ERROR(opened);
    for (End* e : {&a_, &b_}) {
      e->io->RunAndWait([e] {
        e->engine->Start();
        e->poller().MarkDirty(e->engine.get());
      });
    }
    b_.io->RunAndWait([&] { scoped_ = b_.engine->scoped_remote_writes(); });
    return Status::Ok();
  }

  ~EnginePair() {
    for (End* e : {&a_, &b_}) {
      if (!e->io) continue;
      if (e->engine) {
        e->io->RunAndWait([e] {
          e->poller().RemoveEngine(e->engine.get());
          e->engine->Fail(Aborted("benchmark over"), /*notify=*/false);
        });
      }
      e->qp.reset();  // before the engine (Engine::~Engine)
      e->engine.reset();
      e->io.reset();
    }
  }

  // Queues `count` messages of `bytes` (from one source buffer each, allocated up front).
  void Send(std::vector<Buffer> messages) {
    auto* raw = new std::vector<Buffer>(std::move(messages));
    a_.io->Post([this, raw] {
      std::unique_ptr<std::vector<Buffer>> owned(raw);
      for (Buffer& m : *owned) a_.engine->Enqueue(0, engine::OutgoingMessage{std::move(m), {}});
      a_.poller().MarkDirty(a_.engine.get());
    });
  }

  Status WaitReceived(uint64_t n) {
    std::unique_lock lock(b_.mu);
    if (!b_.cv.wait_for(lock, std::chrono::seconds(120),
                        [&] { return b_.received >= n || b_.failure || a_.failure; }))
      return DeadlineExceeded("rendezvous did not arrive within 120 s");
    if (b_.failure) return *b_.failure;
    if (a_.failure) return *a_.failure;
    return Status::Ok();
  }

  uint64_t received() {
    std::lock_guard lock(b_.mu);
    return b_.received;
  }
  bool scoped() const { return scoped_; }
  engine::EngineCounters receiver_counters() {
    engine::EngineCounters c;
    b_.io->RunAndWait([&] { c = b_.engine->counters(); });
    return c;
  }

 private:
  End a_, b_;
  bool scoped_ = false;
};

std::vector<Buffer> Messages(size_t count, size_t bytes) {
  std::vector<Buffer> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    auto b = Buffer::Allocate(bytes);
    if (!b.ok()) break;
    out.push_back(std::move(b).value());
  }
  return out;
}

struct Cell {
  double one_at_a_time_us = 0;
  double back_to_back_us = 0;
  uint64_t windows_bound = 0;
};

// One run of both patterns on a fresh pair.
Result<Cell> RunOnce(verbs::Device& device, bool scoped, size_t bytes, size_t count) {
  engine::EngineConfig config;
  config.scoped_remote_writes = scoped;
  EnginePair pair;
  BX_RETURN_IF_ERROR(pair.Build(device, config));
  if (pair.scoped() != scoped)
    return FailedPrecondition("the device does not support scoped remote writes");
  // Warm-up: the pool's regions, the engines' window pool and the caches.
  pair.Send(Messages(8, bytes));
  BX_RETURN_IF_ERROR(pair.WaitReceived(8));
  Cell cell;
  {
    auto start = Clock::now();
    for (size_t i = 0; i < count; ++i) {
      uint64_t have = pair.received();
      pair.Send(Messages(1, bytes));
      BX_RETURN_IF_ERROR(pair.WaitReceived(have + 1));
    }
    cell.one_at_a_time_us =
        std::chrono::duration<double, std::micro>(Clock::now() - start).count() / double(count);
  }
  {
    uint64_t have = pair.received();
    std::vector<Buffer> batch = Messages(count, bytes);
    auto start = Clock::now();
    pair.Send(std::move(batch));
    BX_RETURN_IF_ERROR(pair.WaitReceived(have + count));
    cell.back_to_back_us =
        std::chrono::duration<double, std::micro>(Clock::now() - start).count() / double(count);
  }
  cell.windows_bound = pair.receiver_counters().windows_bound;
  return cell;
}

int Run(const std::string& device_name, size_t count, int reps, bool as_json) {
  if (Status s = EnsureMemoryPool(device_name); !s.ok()) {
    fmt::print(stderr, "bx bench rendezvous: {}\n", s.ToString());
    return 1;
  }
  verbs::Device* device = bemalloc::RegisteredDevice();
  if (device == nullptr) {
    fmt::print(stderr, "bx bench rendezvous: bemalloc is not on a verbs device\n");
    return 1;
  }
  json rows = json::array();
  if (!as_json) {
    fmt::print("rendezvous over {} ({} per run, median of {} runs), us per rendezvous\n",
               device->name(), count, reps);
    fmt::print("{:>8}  {:>13} {:>13} {:>7}   {:>13} {:>13} {:>7}\n", "size", "1-at-a-time", "", "",
               "back-to-back", "", "");
    fmt::print("{:>8}  {:>13} {:>13} {:>7}   {:>13} {:>13} {:>7}\n", "", "region rkey", "window",
               "ratio", "region rkey", "window", "ratio");
  }
  for (size_t bytes : {size_t{64} << 10, size_t{1} << 20}) {
    std::vector<double> single[2], stream[2];
    uint64_t windows = 0;
    // Alternate on and off so that drift on a shared machine hits both alike.
    for (int r = 0; r < reps; ++r) {
      for (bool scoped : {false, true}) {
        auto cell = RunOnce(*device, scoped, bytes, count);
        if (!cell.ok()) {
          fmt::print(stderr, "bx bench rendezvous: {} bytes, scoped {}: {}\n", bytes, scoped,
                     cell.status().ToString());
          return 1;
        }
        single[scoped].push_back(cell->one_at_a_time_us);
        stream[scoped].push_back(cell->back_to_back_us);
        if (scoped) windows = cell->windows_bound;
      }
    }
    double s0 = Percentile(single[0], 0.5), s1 = Percentile(single[1], 0.5);
    double b0 = Percentile(stream[0], 0.5), b1 = Percentile(stream[1], 0.5);
    if (as_json) {
      rows.push_back({{"bytes", bytes},
                      {"count", count},
                      {"reps", reps},
                      {"one_at_a_time_us", {{"region_rkey", s0}, {"window", s1}}},
                      {"one_at_a_time_ratio", s0 > 0 ? s1 / s0 : 0},
                      {"back_to_back_us", {{"region_rkey", b0}, {"window", b1}}},
                      {"back_to_back_ratio", b0 > 0 ? b1 / b0 : 0},
                      {"windows_bound_per_run", windows}});
    } else {
      fmt::print("{:>8}  {:>13.1f} {:>13.1f} {:>7.3f}   {:>13.1f} {:>13.1f} {:>7.3f}\n",
                 bytes >= (1u << 20) ? fmt::format("{} MiB", bytes >> 20)
                                     : fmt::format("{} KiB", bytes >> 10),
                 s0, s1, s0 > 0 ? s1 / s0 : 0, b0, b1, b0 > 0 ? b1 / b0 : 0);
    }
  }
  if (as_json) fmt::print("{}\n", json{{"device", device->name()}, {"rows", rows}}.dump(2));
  return 0;
}

}  // namespace

void AddBenchRendezvousCommand(CLI::App* bench) {
  auto* cmd = bench->add_subcommand(
      "rendezvous", "Cost of scoped remote writes (memory windows) per rendezvous, on and off");
  struct Options {
    std::string device = "bxsim0";
    size_t count = 1000;
    int reps = 3;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  cmd->add_option("--device", options->device, "Device (default bxsim0, the simnic)");
  cmd->add_option("--count", options->count, "Rendezvous per run and pattern")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  cmd->add_option("--reps", options->reps, "Runs per cell (the median is shown)")
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--json", options->json, "Print JSON");
  cmd->callback([options] {
    int rc = Run(options->device, options->count, options->reps, options->json);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace bx::tools
