// Engines over the simnic: messages, ordering, credits, known-buffer writes, QP errors.
#include <gtest/gtest.h>

#include "base/sanitizer_build.h"
#include "engine/tests/engine_fixture.h"

namespace bx::engine {
namespace {

TEST_F(EngineTest, EagerAndRendezvousKeepOrderAndIntegrityBothWays) {
  EngineConfig config;
  config.eager_limit = 4096;
  config.fragment_bytes = 256 << 10;
  Build(config);
  std::mt19937_64 rng(1);
  // 8 MiB, not 64: its 32 fragments interleave with the eager messages both ways, and any of
  // them out of order or corrupt fails the check as one of 64 MiB's 256 would.
  constexpr size_t kLargest = 8u << 20;
  std::vector<size_t> sizes = {1, 0, 4096, 4097, kLargest, 100, 1 << 20, 3};
  for (int i = 0; i < 40; ++i) sizes.push_back(1 + rng() % (i % 4 == 0 ? (2u << 20) : 8192u));
  for (size_t i = 0; i < sizes.size(); ++i) {
    a_.Send(MakeMessage(sizes[i], i));
    b_.Send(MakeMessage(sizes[i], 1000 + i));
  }
  ASSERT_TRUE(b_.WaitFor(sizes.size())) << "b received " << b_.received_count;
  ASSERT_TRUE(a_.WaitFor(sizes.size())) << "a received " << a_.received_count;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(SameAs(b_.received[i], sizes[i], i)) << "a->b message " << i << " of " << sizes[i];
    EXPECT_TRUE(SameAs(a_.received[i], sizes[i], 1000 + i)) << "b->a message " << i;
  }
  auto ca = CountersOf(a_);
  size_t large = 0;
  for (size_t s : sizes) large += s > config.eager_limit ? 1 : 0;
  EXPECT_EQ(ca.rendezvous_sent, large) << "rendezvous above the eager limit";
  EXPECT_EQ(ca.eager_sent, sizes.size() - large) << "eager at or below it";
  EXPECT_GE(ca.fragments, kLargest / config.fragment_bytes);
  EXPECT_FALSE(a_.failure.has_value());
  EXPECT_FALSE(b_.failure.has_value());
}

TEST_F(EngineTest, ReceivedEagerBuffersAreTheNicsBuffersNotCopies) {
  EngineConfig config;
  Build(config);
  a_.Send(MakeMessage(100, 7));
  ASSERT_TRUE(b_.WaitFor(1));
  const Buffer& got = b_.received[0];
  EXPECT_EQ(got.size(), 100u);
  EXPECT_GE(got.capacity(), config.eager_limit) << "the posted receive buffer itself";
  EXPECT_NE(bemalloc::GetMR(got.data()), nullptr);
}

// Both sides send as fast as they can; credits must keep every SEND within the peer's posted
// receives (rnr_retry = 0 would turn any RNR into a QP error), and batching must really batch.
TEST_F(EngineTest, MillionMessagesBothWaysWithoutRnr) {
  EngineConfig config;
  config.recv_queue_depth = 32;
  Build(config);
  a_.keep = b_.keep = false;
  // A sanitizer build runs several times slower: fewer messages keep it well inside the test's
  // time limit on a loaded machine.
  constexpr uint64_t kPerSide = kSanitizerBuild ? 100'000 : 500'000;
  constexpr uint64_t kChunk = 250;  // kPerSide is a whole number of chunks
  std::thread senders[2];
  Side* sides[2] = {&a_, &b_};
  for (int i = 0; i < 2; ++i) {
    senders[i] = std::thread([s = sides[i]] {
      for (uint64_t sent = 0; sent < kPerSide; sent += kChunk) {
        // Keep the backlog bounded so the test measures the engine, not a growing queue.
        // Sleep rather than yield: on a loaded 2-core machine a yielding thread still takes
        // CPU from the I/O threads it is waiting for.
        while (sent - s->sends_done.load() > 8 * kChunk)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        std::vector<Buffer> chunk;
        for (uint64_t j = 0; j < kChunk; ++j)
          chunk.push_back(std::move(Buffer::Allocate(8)).value());
        auto* raw = new std::vector<Buffer>(std::move(chunk));
        s->io->Post([s, raw] {
          std::unique_ptr<std::vector<Buffer>> msgs(raw);
          for (auto& m : *msgs)
            s->engine->Enqueue(s->channel, OutgoingMessage{std::move(m), [s](const Status& st) {
                                                             if (!st.ok())
                                                               s->send_errors.fetch_add(1);
                                                             s->sends_done.fetch_add(1);
                                                           }});
          s->poller().MarkDirty(s->engine.get());
        });
      }
    });
  }
  for (auto& t : senders) t.join();
  ASSERT_TRUE(a_.WaitFor(kPerSide, std::chrono::seconds(240))) << a_.received_count;
  ASSERT_TRUE(b_.WaitFor(kPerSide, std::chrono::seconds(240))) << b_.received_count;
  EXPECT_FALSE(a_.failure.has_value()) << a_.failure->ToString();
  EXPECT_FALSE(b_.failure.has_value()) << b_.failure->ToString();
  for (int i = 0; i < 10000 && a_.sends_done.load() < kPerSide; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(a_.send_errors.load(), 0u);
  // Compare batch counters at a moment with nothing in flight, read in the same I/O-thread task
  // (a credit update may go out at any time, so two separate reads could straddle one).
  EngineCounters ca;
  uint32_t in_flight = 1;
  for (int i = 0; i < 1000 && in_flight != 0; ++i) {
    a_.io->RunAndWait([&] {
      in_flight = a_.engine->chain().in_flight();
      ca = a_.engine->counters();
    });
    if (in_flight != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(in_flight, 0u);
  EXPECT_EQ(ca.messages_sent, kPerSide);
  EXPECT_GT(ca.requests_posted, ca.batches) << "more than one request per doorbell under load";
  EXPECT_EQ(ca.signalled_completions, ca.batches) << "one signalled completion per batch";
  EXPECT_GT(ca.credit_stalls, 0u) << "the sender really ran into the credit limit";
  verbs::Library& lib = g_device->lib();
  bxsim_device_counters dc{};
  ASSERT_EQ(lib.sim().query_counters(g_device->context(), &dc), 0);
  EXPECT_EQ(dc.rnr_naks, 0u) << "receiver-not-ready never happened";
  EXPECT_EQ(dc.rnr_retry_exceeded, 0u);
  for (Side* s : {&a_, &b_}) {
    s->io->RunAndWait([s] {
      EXPECT_LE(s->engine->send_credits().available(), s->engine->send_credits().limit());
    });
  }
}

TEST_F(EngineTest, WritesIntoAKnownRemoteBufferSkipTheExchange) {
  EngineConfig config;
  config.eager_limit = 4096;
  config.fragment_bytes = 64 << 10;
  Build(config);
  // b's "tensor": registered memory whose address and rkey a knows in advance.
  Buffer tensor = std::move(Buffer::Allocate(1 << 20)).value();
  std::memset(tensor.data(), 0, tensor.size());
  RemoteBuffer target{reinterpret_cast<uint64_t>(tensor.data()), tensor.rkey()};
  Buffer update = MakeMessage(1 << 20, 77);
  a_.io->RunAndWait([&] {
    a_.engine->EnqueueWrite(a_.channel, OutgoingMessage{std::move(update), {}}, target, 42);
    a_.poller().MarkDirty(a_.engine.get());
  });
  ASSERT_TRUE(b_.WaitFor(1));
  ASSERT_EQ(b_.remote_write_tags.size(), 1u);
  EXPECT_EQ(b_.remote_write_tags[0], 42);
  EXPECT_TRUE(SameAs(tensor, 1 << 20, 77)) << "the bytes are in place when the tag arrives";
  auto ca = CountersOf(a_);
  EXPECT_EQ(ca.rendezvous_sent, 0u) << "no metadata exchange";
  EXPECT_EQ(ca.remote_writes, 1u);
  EXPECT_EQ(ca.fragments, 16u);
}

#ifndef NDEBUG
// The engine's thread rule (engine.h) is checked once it is on an I/O thread: a send queued
// from the application's thread instead of through the thread's task queue aborts in Debug and
// sanitizer builds, where it would otherwise race the I/O thread on the channel's queue.
TEST_F(EngineTest, ASendFromAnotherThreadThanTheEnginesAbortsInDebugBuilds) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Build();
  EXPECT_DEATH(a_.engine->Enqueue(a_.channel, OutgoingMessage{MakeMessage(64, 1), {}}),
               "check failed: OnHomeThread");
  a_.Send(MakeMessage(64, 1));  // the same send through the thread arrives
  ASSERT_TRUE(b_.WaitFor(1));
}
#endif

TEST_F(EngineTest, QpErrorFailsQueuedSendsOnceAndReportsIt) {
  Build();
  verbs::Library& lib = g_device->lib();
  ASSERT_EQ(lib.sim().force_qp_error(a_.qp->qp()), 0);
  {
    std::unique_lock lock(a_.mu);
    ASSERT_TRUE(
        a_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return a_.failure.has_value(); }));
  }
  EXPECT_NE(a_.failure->message().find("QP"), std::string::npos) << a_.failure->ToString();
  a_.Send(MakeMessage(10, 1));
  for (int i = 0; i < 1000 && a_.sends_done.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(a_.sends_done.load(), 1u);
  EXPECT_EQ(a_.send_errors.load(), 1u);
}

// Moving a QP to ERR does not stop the NIC at once: a request it has started may still read its
// send buffer (or write a receive) until its flush completion. With the simnic's completion delay
// a send is still in flight when its engine fails; its buffer must stay allocated (not be handed
// out again) until the QP is destroyed.
TEST_F(EngineTest, AFailedEngineKeepsInFlightBuffersUntilItsQpIsDestroyed) {
  Build();
  verbs::Library& lib = g_device->lib();
  ASSERT_NE(lib.sim().set_completion_delay, nullptr);
  ASSERT_EQ(lib.sim().set_completion_delay(g_device->context(), 5'000'000'000), 0);  // 5 s
  constexpr size_t kSize = 4096;  // one eager SEND
  Buffer message = MakeMessage(kSize, 7);
  const std::byte* in_flight = message.data();
  const uint64_t posted_before = CountersOf(a_).requests_posted;
  a_.Send(std::move(message));
  bool posted = false;
  for (int i = 0; i < 10000 && !(posted = CountersOf(a_).requests_posted > posted_before); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(posted);
  ASSERT_EQ(a_.sends_done.load(), 0u) << "the send completed despite the delay";

  // Fail it on its own thread, and ask for blocks of the same size there and here: a freed
  // block comes back first.
  std::vector<Buffer> fresh;
  a_.io->RunAndWait([&] {
    a_.engine->Fail(Aborted("failed by the test"), /*notify=*/false);
    for (int i = 0; i < 16; ++i) fresh.push_back(Buffer::Allocate(kSize).value());
  });
  for (int i = 0; i < 16; ++i) fresh.push_back(Buffer::Allocate(kSize).value());
  ASSERT_EQ(lib.sim().set_completion_delay(g_device->context(), 0), 0);
  EXPECT_EQ(a_.sends_done.load(), 1u);
  EXPECT_EQ(a_.send_errors.load(), 1u);
  for (const Buffer& b : fresh) {
    EXPECT_NE(b.data(), in_flight) << "the buffer of a send still in flight was reused";
  }
}

}  // namespace
}  // namespace bx::engine
