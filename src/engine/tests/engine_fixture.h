// The engine tests' fixture: two engines on a loopback RC QP pair of bxsim0, each driven by its
// own I/O thread, exchanging messages through bemalloc buffers. Included by one test file each.
#pragma once

#include "engine/engine.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "alloc/testing/test_memory.h"
#include "alloc/verbs_registrar.h"
#include "bx/bemalloc.h"
#include "engine/engine_poller.h"
#include "verbs/port_address.h"
#include "verbs/rc_connect.h"

namespace bx::engine {

inline verbs::Device* g_device = nullptr;

inline Buffer MakeMessage(size_t size, uint64_t seed) {
  auto b = Buffer::Allocate(size);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  Buffer buf = std::move(b).value();
  std::mt19937_64 rng(seed);
  auto* p = reinterpret_cast<uint8_t*>(buf.data());
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < size; ++i) p[i] = uint8_t(rng());
  return buf;
}

inline bool SameAs(const Buffer& b, size_t size, uint64_t seed) {
  if (b.size() != size) return false;
  Buffer expect = MakeMessage(size, seed);
  return std::memcmp(expect.data(), b.data(), size) == 0;
}

struct Side {
  ChannelId channel = 0;  // the channel this side opens and sends on
  std::shared_ptr<IoThread> io;
  EnginePoller& poller() { return EnginePoller::Of(*io); }  // io's, for the engine
  std::optional<verbs::RcQueuePair> qp;
  std::unique_ptr<Engine> engine;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Buffer> received;
  uint64_t received_count = 0;
  bool keep = true;  // keep received buffers (integrity tests) or only count them (stress)
  std::optional<Status> failure;
  std::vector<uint16_t> remote_write_tags;
  // Rendezvous destinations this side granted (Callbacks::on_granted), in order.
  struct Grant {
    uint16_t id;
    RemoteBuffer target;
    uint64_t length;
  };
  std::vector<Grant> granted;
  std::vector<ChannelId> received_channels;         // the channel of each received message
  std::vector<ChannelId> closed_by_peer, released;  // channel events, in order
  // Requests prepared (channel, bytes, last), recorded while `tracing` (I/O thread only).
  bool tracing = false;
  // Runs on the I/O thread as each message arrives, before it is recorded (e.g. to answer it).
  std::function<void(ChannelId, const Buffer&)> on_message_hook;
  // Runs on the I/O thread as each data request is prepared, before the batch is posted.
  std::function<void(ChannelId, uint32_t bytes, bool last)> on_prepared_hook;
  std::vector<std::tuple<ChannelId, uint32_t, bool>> trace;
  std::atomic<uint64_t> sends_done{0};
  std::atomic<uint64_t> send_errors{0};

  void Send(Buffer message) {
    auto* raw = new Buffer(std::move(message));
    io->Post([this, raw] {
      std::unique_ptr<Buffer> m(raw);
      engine->Enqueue(channel, OutgoingMessage{std::move(*m), [this](const Status& s) {
                                                 if (!s.ok()) send_errors.fetch_add(1);
                                                 sends_done.fetch_add(1);
                                               }});
      poller().MarkDirty(engine.get());
    });
  }
  // Waits until `n` messages arrived; false on timeout.
  bool WaitFor(uint64_t n, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    std::unique_lock lock(mu);
    bool ok = cv.wait_for(lock, timeout, [&] {
      return received_count >= n || failure.has_value();
    }) && received_count >= n;
    if (failure) ADD_FAILURE() << "engine failed: " << failure->ToString();
    return ok;
  }
};

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g_device = &test_support::InitTestMemory(); }

  void Build(const EngineConfig& config = {}) { BuildPair(a_, b_, config); }

  // Connects `a` and `b` (a fresh pair of sides) with `config`; `a` opens channel 0, `b` 1. Each
  // side gets an I/O thread of its own made with io_options_, or `io_a` / `io_b` when given.
  void BuildPair(Side& a, Side& b, const EngineConfig& config,
                 std::shared_ptr<IoThread> io_a = nullptr,
                 std::shared_ptr<IoThread> io_b = nullptr) {
    verbs::Library& lib = g_device->lib();
    // Addressed as the transport addresses its QPs, so the tests run on every device profile.
    auto port = verbs::FirstActivePort(*g_device);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    auto address = verbs::ResolvePortAddress(*g_device, *port, nullptr, -1);
    ASSERT_TRUE(address.ok()) << address.status().ToString();
    for (Side* s : {&a, &b}) {
      if (std::shared_ptr<IoThread> given = s == &a ? io_a : io_b) {
        s->io = std::move(given);
      } else {
        auto io = EnginePoller::StartThread(lib, g_device->context(), nullptr, io_options_);
        ASSERT_TRUE(io.ok()) << io.status().ToString();
        s->io = std::move(io).value();
      }
      verbs::QueuePairAttrs attrs;
      attrs.max_send_wr = config.send_queue_depth;
      attrs.max_recv_wr = config.recv_queue_depth;
      attrs.max_inline_data = 64;
      auto qp = verbs::CreateRcQueuePair(lib, g_device->context(), g_device->pd(), attrs,
                                         s->poller().cq());
      ASSERT_TRUE(qp.ok()) << qp.status().ToString();
      s->qp.emplace(std::move(qp).value());
      verbs::RcOptions rc;
      ASSERT_TRUE(verbs::MoveRcToInit(lib, s->qp->qp(), *port, rc).ok());
      Engine::Callbacks cb;
      cb.on_message = [s](ChannelId channel, Buffer m) {
        if (s->on_message_hook) s->on_message_hook(channel, m);
        std::lock_guard lock(s->mu);
        ++s->received_count;
        if (s->keep) s->received_channels.push_back(channel);
        if (s->keep) s->received.push_back(std::move(m));
        s->cv.notify_all();
      };
      cb.on_remote_write = [s](ChannelId, uint16_t tag) {
        std::lock_guard lock(s->mu);
        s->remote_write_tags.push_back(tag);
        ++s->received_count;
        s->cv.notify_all();
      };
      cb.on_channel_closed = [s](ChannelId channel) {
        std::lock_guard lock(s->mu);
        s->closed_by_peer.push_back(channel);
        s->cv.notify_all();
      };
      cb.on_channel_released = [s](ChannelId channel) {
        std::lock_guard lock(s->mu);
        s->released.push_back(channel);
        s->cv.notify_all();
      };
      cb.on_prepared = [s](ChannelId channel, uint32_t bytes, bool last) {
        if (s->tracing) s->trace.emplace_back(channel, bytes, last);
        if (s->on_prepared_hook) s->on_prepared_hook(channel, bytes, last);
      };
      cb.on_granted = [s](uint16_t id, RemoteBuffer target) {
        std::lock_guard lock(s->mu);
        s->granted.push_back({id, target, target.length});
      };
      cb.on_failure = [s](const Status& why) {
        std::lock_guard lock(s->mu);
        s->failure = why;
        s->cv.notify_all();
      };
      s->engine = std::make_unique<Engine>(lib, s->qp->qp(), config, cb);
      ASSERT_TRUE(s->engine->PostInitialReceives().ok());
      s->engine->SetPeer({config.recv_queue_depth, config.eager_limit, config.max_message_bytes});
    }
    verbs::RcOptions rc;
    rc.rnr_retry = 0;  // any receiver-not-ready fails the QP loudly
    rc.mtu = address->active_mtu;
    verbs::SetPath(*address, address->lid, address->gid, &rc);
    const ibv_gid gid = address->gid;
    ASSERT_TRUE(verbs::MoveRcToRts(lib, a.qp->qp(), *port, b.qp->qp_num(), gid, rc).ok());
    ASSERT_TRUE(verbs::MoveRcToRts(lib, b.qp->qp(), *port, a.qp->qp_num(), gid, rc).ok());
    b.channel = 1;
    // Both engines take completions before either sends (an unregistered QP's are dropped).
    for (Side* s : {&a, &b}) s->io->RunAndWait([s] { s->poller().AddEngine(s->engine.get()); });
    for (Side* s : {&a, &b}) {
      s->io->RunAndWait([s] {
        ASSERT_TRUE(s->engine->OpenChannel(s->channel).ok());
        s->engine->Start();
        s->poller().MarkDirty(s->engine.get());
      });
    }
  }

  void TearDown() override {
    for (Side* s : {&a_, &b_, &c_, &d_}) TearDownSide(*s);
  }

  static void TearDownSide(Side& side) {
    Side* s = &side;
    if (!s->io) return;
    s->io->RunAndWait([s] {
      s->poller().RemoveEngine(s->engine.get());
      s->engine->Fail(Aborted("test over"), /*notify=*/false);
    });
    s->qp.reset();  // before the engine, which holds what the NIC may still touch
    s->engine.reset();
    s->io.reset();
  }

  EngineCounters CountersOf(Side& s) {
    EngineCounters c;
    s.io->RunAndWait([&] { c = s.engine->counters(); });
    return c;
  }

  // Waits until `s`'s peer has closed a channel; false on timeout.
  static bool WaitClosedByPeer(Side& s, std::chrono::seconds timeout) {
    std::unique_lock lock(s.mu);
    return s.cv.wait_for(lock, timeout, [&] { return !s.closed_by_peer.empty(); });
  }

  // `s`'s counters once every window it bound is invalidated, or after about five seconds: an
  // aborted transfer's invalidate may still be on its way when the peer's close arrives.
  EngineCounters CountersOnceGrantsEnd(Side& s) {
    EngineCounters c;
    for (int i = 0; i < 5000; ++i) {
      c = CountersOf(s);
      if (c.windows_bound == c.windows_invalidated) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return c;
  }

  IoThreadOptions io_options_;  // for the I/O threads BuildPair makes
  Side a_, b_;
  Side c_, d_;  // a second pair, for tests that need one (BuildPair(c_, d_, ...))
};

}  // namespace bx::engine
