// Rendezvous requests announced ahead: the messages queued behind the one under way on a channel
// send their requests early, within the engine's bounds, and arrive intact and in order; when
// the channel closes, each announced message ends with an abort, so the peer frees (and
// invalidates the window of) every destination it granted.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "engine/tests/engine_fixture.h"

namespace bx::engine {
namespace {

EngineConfig AheadConfig(uint64_t ahead_bytes) {
  EngineConfig config;
  config.eager_limit = 4096;
  config.rendezvous_ahead_bytes = ahead_bytes;
  config.rendezvous_ahead_messages = 4;
  return config;
}

// Queues `messages` on a's channel in one I/O-thread task, so the first pump finds them all.
void SendAllAtOnce(Side& a, std::vector<Buffer> messages) {
  a.io->RunAndWait([&a, &messages] {
    for (Buffer& m : messages) {
      a.engine->Enqueue(a.channel, OutgoingMessage{std::move(m), [&a](const Status& s) {
                                                     if (!s.ok()) a.send_errors.fetch_add(1);
                                                     a.sends_done.fetch_add(1);
                                                   }});
    }
    a.poller().MarkDirty(a.engine.get());
  });
}

// Sends `count` messages of `size` bytes from a to b and checks that every one arrived intact and
// in order. Returns the most rendezvous a had under way at once: requests sent whose last
// fragment was not prepared yet (the message being written and those announced behind it).
uint64_t StreamAndMeasureUnderWay(Side& a, Side& b, int count, size_t size) {
  uint64_t lasts = 0, most = 0;  // a's I/O thread only
  a.on_prepared_hook = [&a, &lasts, &most](ChannelId, uint32_t, bool last) {
    most = std::max(most, a.engine->counters().rendezvous_sent - lasts);
    lasts += last;
  };
  std::vector<Buffer> messages;
  for (int i = 0; i < count; ++i) messages.push_back(MakeMessage(size, 100 + i));
  SendAllAtOnce(a, std::move(messages));
  EXPECT_TRUE(b.WaitFor(count));
  a.io->RunAndWait([&a] { a.on_prepared_hook = nullptr; });
  std::lock_guard lock(b.mu);
  for (int i = 0; i < count && i < int(b.received.size()); ++i) {
    EXPECT_TRUE(SameAs(b.received[i], size, 100 + i)) << "message " << i;
  }
  return most;
}

TEST_F(EngineTest, RendezvousRequestsGoAheadOfTheMessageUnderWayWithinTheirBound) {
  EngineConfig config = AheadConfig(256 << 10);
  Build(config);
  // 50,000-byte messages: 256 KiB holds five, the per-channel bound of four applies first.
  const uint64_t most = StreamAndMeasureUnderWay(a_, b_, 60, 50000);
  const EngineCounters ca = CountersOf(a_);
  EXPECT_GT(ca.rendezvous_ahead, 0u) << "a stream of large messages announces ahead";
  EXPECT_EQ(ca.rendezvous_sent, 60u);
  EXPECT_EQ(most, 1u + config.rendezvous_ahead_messages)
      << "the message being written and four announced behind it, no more";
  EXPECT_FALSE(a_.failure.has_value());
}

// rendezvous_ahead_bytes = 0: the request of each message waits for the one before it.
TEST_F(EngineTest, WithoutAheadBytesOneRendezvousAtATime) {
  Build(AheadConfig(0));
  EXPECT_EQ(StreamAndMeasureUnderWay(a_, b_, 30, 50000), 1u);
  EXPECT_EQ(CountersOf(a_).rendezvous_ahead, 0u);
}

// 100,000 bytes ahead and messages of 150,000: none fits, each waits for its turn.
TEST_F(EngineTest, MessagesLargerThanTheAheadBytesWaitTheirTurn) {
  Build(AheadConfig(100000));
  EXPECT_EQ(StreamAndMeasureUnderWay(a_, b_, 10, 150000), 1u);
  EXPECT_EQ(CountersOf(a_).rendezvous_ahead, 0u);
}

// Closing the channel while messages are announced ahead: their senders hear at once, and each
// still ends its exchange with an abort once its reply is in, so the peer's grants all end.
TEST_F(EngineTest, AnnouncedMessagesAreAbortedWhenTheChannelCloses) {
  Build(AheadConfig(1 << 20));
  std::vector<Buffer> messages;
  messages.push_back(MakeMessage(64u << 20, 1));  // long enough to close while it is written
  for (int i = 0; i < 4; ++i) messages.push_back(MakeMessage(200000, 2 + i));
  SendAllAtOnce(a_, std::move(messages));
  bool announced = false;
  for (int i = 0; i < 10000 && !announced; ++i) {
    announced = CountersOf(a_).rendezvous_ahead >= 4;
    if (!announced) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_TRUE(announced) << "the four messages behind the first were announced";
  a_.io->RunAndWait([&] { a_.engine->CloseChannel(a_.channel, Aborted("test closes")); });
  EXPECT_EQ(a_.sends_done.load(), 5u) << "every sender hears at once";
  // The close goes after the last abort.
  ASSERT_TRUE(WaitClosedByPeer(b_, std::chrono::seconds(60)));
  EngineCounters cb = CountersOnceGrantsEnd(b_);
  EXPECT_EQ(cb.windows_bound, 5u) << "a destination was granted for each";
  EXPECT_EQ(cb.windows_bound, cb.windows_invalidated) << "every grant ended";
  EXPECT_FALSE(a_.failure.has_value());
  EXPECT_FALSE(b_.failure.has_value());
  // b closes its side in turn (on_channel_closed): the channel is released at both ends.
  b_.io->RunAndWait([&] { b_.engine->CloseChannel(a_.channel, Aborted("peer closed")); });
  std::unique_lock lock(a_.mu);
  EXPECT_TRUE(a_.cv.wait_for(lock, std::chrono::seconds(30), [&] { return !a_.released.empty(); }))
      << "a's channel is released once both closes are through";
}

}  // namespace
}  // namespace bx::engine
