// Channels over one engine: the scheduler interleaves them fragment by fragment, the send window
// bounds outstanding bytes, and closing a channel ends only that channel.
#include <gtest/gtest.h>

#include "engine/tests/engine_fixture.h"

namespace bx::engine {
namespace {

// Queues `message` on `channel` of side `s` from its I/O thread.
void SendOn(Side& s, ChannelId channel, Buffer message) {
  auto* raw = new Buffer(std::move(message));
  s.io->Post([&s, channel, raw] {
    std::unique_ptr<Buffer> m(raw);
    s.engine->Enqueue(channel, OutgoingMessage{std::move(*m), [&s](const Status& st) {
                                                 if (!st.ok()) s.send_errors.fetch_add(1);
                                                 s.sends_done.fetch_add(1);
                                               }});
    s.poller().MarkDirty(s.engine.get());
  });
}

void Open(Side& s, ChannelId channel) {
  s.io->RunAndWait([&] {
    ASSERT_TRUE(s.engine->OpenChannel(channel).ok());
    s.poller().MarkDirty(s.engine.get());
  });
}

class EngineChannelsTest : public EngineTest {};

// A 64-byte message on one channel, queued while a 64 MiB message of another channel is being
// written, goes out after at most one more fragment of it: scheduling is per fragment.
TEST_F(EngineChannelsTest, SmallMessageWaitsBehindAtMostOneFragmentOfALargeOne) {
  EngineConfig config;
  config.eager_limit = 4096;
  config.fragment_bytes = 64 << 10;
  Build(config);
  constexpr ChannelId kLarge = 0, kSmall = 7;
  Open(a_, kSmall);
  // Once the large message is well under way (its 32nd fragment prepared, of 1024), the small one
  // is queued from the I/O thread itself, right after the batch being prepared: however the
  // threads are scheduled, most of the large message is still to go.
  a_.io->RunAndWait([this] {
    a_.on_prepared_hook = [this, large_fragments = 0](ChannelId channel, uint32_t, bool) mutable {
      if (channel != kLarge || ++large_fragments != 32) return;
      a_.io->Post([this] {
        a_.tracing = true;
        a_.engine->Enqueue(kSmall, OutgoingMessage{MakeMessage(64, 2), {}});
        a_.poller().MarkDirty(a_.engine.get());
      });
    };
  });
  SendOn(a_, kLarge, MakeMessage(64u << 20, 1));
  ASSERT_TRUE(b_.WaitFor(2, std::chrono::seconds(120)));
  std::vector<std::tuple<ChannelId, uint32_t, bool>> trace;
  a_.io->RunAndWait([&] { trace = a_.trace; });
  size_t large_before = 0;
  bool found = false;
  for (auto& [channel, bytes, last] : trace) {
    if (channel == kSmall) {
      found = true;
      break;
    }
    ++large_before;
  }
  ASSERT_TRUE(found);
  EXPECT_LE(large_before, 1u) << "fragments of the large message ahead of the small one";
  std::lock_guard lock(b_.mu);
  ASSERT_EQ(b_.received_channels.size(), 2u);
  EXPECT_EQ(b_.received_channels[0], kSmall) << "the small message did not wait for 64 MiB";
  EXPECT_TRUE(SameAs(b_.received[0], 64, 2));
  EXPECT_TRUE(SameAs(b_.received[1], 64u << 20, 1));
}

// Several channels stream large messages at once. With the window on, outstanding bytes stay at
// or below W (the engine also asserts it on every post in debug builds); with it off the same
// load goes far beyond W, so the first check is not vacuous.
class EngineWindowTest : public EngineTest, public ::testing::WithParamInterface<bool> {};

TEST_P(EngineWindowTest, OutstandingBytesStayWithinTheWindowOnlyWhenItIsOn) {
  const bool window_on = GetParam();
  constexpr uint64_t kWindow = 128 << 10;
  EngineConfig config;
  config.eager_limit = 4096;
  config.fragment_bytes = 32 << 10;
  config.send_window_bytes = window_on ? kWindow : 0;
  Build(config);
  constexpr int kChannels = 8, kPerChannel = 4;
  // Before anything is sent: the I/O threads read `keep` when messages arrive.
  a_.keep = b_.keep = false;
  for (ChannelId c = 10; c < 10 + kChannels; ++c) Open(a_, c);
  for (int i = 0; i < kPerChannel; ++i)
    for (ChannelId c = 10; c < 10 + kChannels; ++c) SendOn(a_, c, MakeMessage(1 << 20, c));
  ASSERT_TRUE(b_.WaitFor(kChannels * kPerChannel, std::chrono::seconds(120)));
  auto counters = CountersOf(a_);
  EXPECT_EQ(a_.send_errors.load(), 0u);
  if (window_on) {
    EXPECT_LE(counters.max_outstanding_bytes, kWindow);
    EXPECT_GT(counters.window_stalls, 0u) << "the load really pressed against the window";
  } else {
    EXPECT_GT(counters.max_outstanding_bytes, kWindow) << "without a window the bound breaks";
    EXPECT_EQ(counters.window_stalls, 0u);
  }
  EXPECT_GE(counters.scheduler_rounds, uint64_t(kChannels * kPerChannel * 32));
}

INSTANTIATE_TEST_SUITE_P(WindowOnOff, EngineWindowTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

// A channel closed with messages queued: they fail with the reason, the peer hears of it, both
// sides release the id, and the other channels keep going.
TEST_F(EngineChannelsTest, ClosingAChannelEndsOnlyThatChannel) {
  EngineConfig config;
  config.eager_limit = 4096;
  Build(config);
  constexpr ChannelId kDoomed = 3;
  Open(a_, kDoomed);
  std::atomic<int> aborted{0};
  a_.io->RunAndWait([&] {
    for (int i = 0; i < 5; ++i)
      a_.engine->Enqueue(kDoomed, OutgoingMessage{MakeMessage(1 << 20, i), [&](const Status& s) {
                                                    if (s.code() == StatusCode::kAborted) ++aborted;
                                                  }});
    a_.engine->CloseChannel(kDoomed, Aborted("closed by the test"));
    a_.poller().MarkDirty(a_.engine.get());
  });
  EXPECT_EQ(aborted.load(), 5) << "nothing had started: every queued message fails";
  {
    std::unique_lock lock(a_.mu);
    ASSERT_TRUE(
        a_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return !a_.released.empty(); }));
    EXPECT_EQ(a_.released[0], kDoomed);
  }
  {
    std::unique_lock lock(b_.mu);
    ASSERT_TRUE(
        b_.cv.wait_for(lock, std::chrono::seconds(10), [&] { return !b_.released.empty(); }));
    ASSERT_EQ(b_.closed_by_peer.size(), 1u);
    EXPECT_EQ(b_.closed_by_peer[0], kDoomed);
  }
  bool a_open = true;
  a_.io->RunAndWait([&] { a_open = a_.engine->ChannelOpen(kDoomed); });
  EXPECT_FALSE(a_open);
  // The id can be opened again, and the surviving channel still carries messages.
  Open(a_, kDoomed);
  SendOn(a_, kDoomed, MakeMessage(100, 9));
  SendOn(a_, a_.channel, MakeMessage(10000, 10));
  ASSERT_TRUE(b_.WaitFor(2));
  EXPECT_FALSE(a_.failure.has_value());
  EXPECT_FALSE(b_.failure.has_value());
}

}  // namespace
}  // namespace bx::engine
