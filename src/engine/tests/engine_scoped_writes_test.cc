// Scoped remote writes: each rendezvous destination is reachable only through a memory window
// bound to exactly its bytes, invalidated before the application gets the buffer. A peer that
// writes outside its grant (or with a grant that has ended) gets a remote access error that ends
// its connection and no other, and nothing outside the grant changes.
#include <gtest/gtest.h>

#include "engine/tests/engine_fixture.h"

namespace bx::engine {
namespace {

constexpr uint8_t kAttackByte = 0xee;

// Posts an unsignalled RDMA WRITE of `length` bytes of `source` to `target.addr + offset` with
// `target.rkey` on `from`'s QP, bypassing its engine: what a buggy peer's NIC would do. Only an
// error completes it, and the engine fails on that error.
int PostRawWrite(Side& from, RemoteBuffer target, uint64_t offset, const Buffer& source,
                 uint32_t length) {
  ibv_sge sge{reinterpret_cast<uint64_t>(source.data()), length, source.lkey()};
  ibv_send_wr wr{};
  wr.wr_id = 0x7777;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = target.addr + offset;
  wr.wr.rdma.rkey = target.rkey;
  ibv_send_wr* bad = nullptr;
  return verbs::Library::PostSend(from.qp->qp(), &wr, &bad);
}

Buffer AttackBytes(size_t size) {
  Buffer b = std::move(Buffer::Allocate(size)).value();
  std::memset(b.data(), kAttackByte, size);
  return b;
}

bool WaitFailure(Side& s) {
  std::unique_lock lock(s.mu);
  return s.cv.wait_for(lock, std::chrono::seconds(10), [&] { return s.failure.has_value(); });
}

std::string RemoteAccessError() {
  return g_device->lib().wc_status_str(IBV_WC_REM_ACCESS_ERR);
}

EngineConfig SmallEager() {
  EngineConfig config;
  config.eager_limit = 4096;
  config.fragment_bytes = 64 << 10;
  return config;
}

// Traffic both ways on a pair, checked byte for byte.
void ExpectPairWorks(Side& a, Side& b, uint64_t seed) {
  const std::vector<size_t> sizes = {100, 300000, 5000, 1 << 20, 7};
  const uint64_t a_before = b.received_count, b_before = a.received_count;
  for (size_t i = 0; i < sizes.size(); ++i) {
    a.Send(MakeMessage(sizes[i], seed + i));
    b.Send(MakeMessage(sizes[i], seed + 100 + i));
  }
  ASSERT_TRUE(b.WaitFor(a_before + sizes.size()));
  ASSERT_TRUE(a.WaitFor(b_before + sizes.size()));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(SameAs(b.received[a_before + i], sizes[i], seed + i)) << i;
    EXPECT_TRUE(SameAs(a.received[b_before + i], sizes[i], seed + 100 + i)) << i;
  }
}

TEST_F(EngineTest, ScopedRendezvousOfManySizesArriveIntactThroughReusedWindows) {
  EngineConfig config = SmallEager();
  ASSERT_TRUE(config.scoped_remote_writes) << "on by default";
  Build(config);
  bool scoped = false;
  b_.io->RunAndWait([&] { scoped = b_.engine->scoped_remote_writes(); });
  ASSERT_TRUE(scoped) << "the simnic has type 2 windows";
  std::mt19937_64 rng(3);
  std::vector<size_t> sizes = {4097, 1, 65536, 65537, 8u << 20, 200, 3 << 20, 4096, 131071};
  for (int i = 0; i < 60; ++i) sizes.push_back(1 + rng() % (i % 3 == 0 ? (1u << 20) : 20000u));
  for (size_t i = 0; i < sizes.size(); ++i) {
    a_.Send(MakeMessage(sizes[i], i));
    b_.Send(MakeMessage(sizes[i], 500 + i));
  }
  ASSERT_TRUE(b_.WaitFor(sizes.size()));
  ASSERT_TRUE(a_.WaitFor(sizes.size()));
  size_t large = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    large += sizes[i] > config.eager_limit ? 1 : 0;
    EXPECT_TRUE(SameAs(b_.received[i], sizes[i], i)) << "a->b " << i << " of " << sizes[i];
    EXPECT_TRUE(SameAs(a_.received[i], sizes[i], 500 + i)) << "b->a " << i;
  }
  auto cb = CountersOf(b_);
  EXPECT_EQ(cb.windows_bound, large);
  EXPECT_EQ(cb.windows_invalidated, large) << "every window is invalidated before delivery";
  EXPECT_EQ(cb.unscoped_rendezvous, 0u);
  // Windows are reused. How many are bound at once depends on timing: the message being
  // written, up to rendezvous_ahead_messages announced behind it, and those whose invalidate
  // waits behind b's own writes on its send queue.
  EXPECT_LT(cb.windows_allocated, large) << "windows are reused";
  // Every grant is exactly the message and none carries the region's rkey; a reused window
  // never hands out the same key twice in a row.
  std::lock_guard lock(b_.mu);
  ASSERT_EQ(b_.granted.size(), large);
  size_t g = 0;
  for (size_t size : sizes) {
    if (size <= config.eager_limit) continue;
    const auto& grant = b_.granted[g];
    EXPECT_EQ(grant.length, size);
    EXPECT_NE(grant.target.rkey, bemalloc::Rkey(reinterpret_cast<void*>(grant.target.addr)));
    if (g > 0) {
      EXPECT_NE(grant.target.rkey, b_.granted[g - 1].target.rkey);
    }
    ++g;
  }
}

TEST_F(EngineTest, WriteOneBytePastTheGrantFailsOnlyThatConnection) {
  EngineConfig config = SmallEager();
  Build(config);
  BuildPair(c_, d_, config);
  // A message b keeps: the neighbour the attack must not reach.
  a_.Send(MakeMessage(100000, 1));
  ASSERT_TRUE(b_.WaitFor(1));

  // When a prepares the first fragment of its next message, b has granted the destination and
  // a holds the reply: write 17 bytes that end one byte past the grant, before any fragment.
  Buffer attack = AttackBytes(64);
  std::vector<uint8_t> before;
  RemoteBuffer grant{};
  uint64_t grant_length = 0;
  int post_rc = -1;
  bool attacked = false;
  a_.on_prepared_hook = [&](ChannelId, uint32_t, bool) {
    if (attacked) return;
    attacked = true;
    {
      std::lock_guard lock(b_.mu);
      grant = b_.granted.back().target;
      grant_length = b_.granted.back().length;
    }
    const auto* at = reinterpret_cast<const uint8_t*>(grant.addr + grant_length - 16);
    const bemalloc::MemoryRegion* region = bemalloc::GetMR(at);
    ASSERT_NE(region, nullptr);
    ASSERT_TRUE(region->Contains(at, 17));
    before.assign(at, at + 17);
    post_rc = PostRawWrite(a_, grant, grant_length - 16, attack, 17);
  };
  a_.Send(MakeMessage(100000, 2));
  ASSERT_TRUE(WaitFailure(a_));
  ASSERT_TRUE(attacked);
  EXPECT_EQ(post_rc, 0);
  EXPECT_NE(a_.failure->message().find(RemoteAccessError()), std::string::npos)
      << "the writer's engine fails with IBV_WC_REM_ACCESS_ERR: " << a_.failure->ToString();
  EXPECT_NE(grant.rkey, bemalloc::Rkey(reinterpret_cast<void*>(grant.addr))) << "a window key";
  const auto* at = reinterpret_cast<const uint8_t*>(grant.addr + grant_length - 16);
  EXPECT_EQ(std::memcmp(at, before.data(), before.size()), 0)
      << "nothing of the failed write landed, inside the grant or past it";
  {
    std::lock_guard lock(b_.mu);
    ASSERT_EQ(b_.received.size(), 1u);
    EXPECT_TRUE(SameAs(b_.received[0], 100000, 1)) << "the neighbouring buffer is intact";
  }
  // The other connection never noticed.
  ExpectPairWorks(c_, d_, 50);
  EXPECT_FALSE(c_.failure.has_value());
  EXPECT_FALSE(d_.failure.has_value());
}

// The control: without windows the same write goes through (the region rkey covers it), so the
// test above does detect a stray write.
TEST_F(EngineTest, WithoutScopingTheSameWriteLandsPastTheBuffer) {
  EngineConfig config = SmallEager();
  config.scoped_remote_writes = false;
  Build(config);
  Buffer attack = AttackBytes(64);
  RemoteBuffer grant{};
  uint64_t grant_length = 0;
  int post_rc = -1;
  bool attacked = false;
  a_.on_prepared_hook = [&](ChannelId, uint32_t, bool) {
    if (attacked) return;
    attacked = true;
    std::lock_guard lock(b_.mu);
    grant = b_.granted.back().target;
    grant_length = b_.granted.back().length;
    post_rc = PostRawWrite(a_, grant, grant_length - 16, attack, 17);
  };
  // 100000 bytes sit in a larger size class: the byte past the message is the buffer's slack.
  a_.Send(MakeMessage(100000, 2));
  ASSERT_TRUE(b_.WaitFor(1));
  EXPECT_EQ(post_rc, 0);
  EXPECT_EQ(grant.rkey, bemalloc::Rkey(reinterpret_cast<void*>(grant.addr))) << "region rkey";
  std::lock_guard lock(b_.mu);
  ASSERT_GT(b_.received[0].capacity(), 100000u);
  EXPECT_TRUE(SameAs(b_.received[0], 100000, 2)) << "the fragments overwrote the grant's bytes";
  EXPECT_EQ(uint8_t(b_.received[0].data()[100000]), kAttackByte) << "the stray byte landed";
  EXPECT_FALSE(a_.failure.has_value());
}

TEST_F(EngineTest, GrantEndsWithTheRendezvous) {
  EngineConfig config = SmallEager();
  Build(config);
  a_.Send(MakeMessage(300000, 9));
  ASSERT_TRUE(b_.WaitFor(1));
  RemoteBuffer grant{};
  {
    std::lock_guard lock(b_.mu);
    ASSERT_EQ(b_.granted.size(), 1u);
    grant = b_.granted[0].target;
  }
  // The message is delivered: its window was invalidated first. The old key writes nothing.
  Buffer attack = AttackBytes(64);
  int post_rc = -1;
  a_.io->RunAndWait([&] { post_rc = PostRawWrite(a_, grant, 0, attack, 64); });
  EXPECT_EQ(post_rc, 0);
  ASSERT_TRUE(WaitFailure(a_));
  EXPECT_NE(a_.failure->message().find(RemoteAccessError()), std::string::npos)
      << a_.failure->ToString();
  std::lock_guard lock(b_.mu);
  EXPECT_TRUE(SameAs(b_.received[0], 300000, 9)) << "the delivered buffer is untouched";
}

// An aborted rendezvous frees its destination only after the window is invalidated, and
// messages behind it on the channel keep their order.
TEST_F(EngineTest, ScopedWindowsSurviveAbortsAndKeepChannelOrder) {
  EngineConfig config = SmallEager();
  Build(config);
  for (int round = 0; round < 20; ++round) {
    a_.Send(MakeMessage(200000, round));
    a_.Send(MakeMessage(10, 1000 + round));  // eager, right behind the rendezvous
  }
  ASSERT_TRUE(b_.WaitFor(40));
  for (int round = 0; round < 20; ++round) {
    EXPECT_TRUE(SameAs(b_.received[2 * round], 200000, round)) << round;
    EXPECT_TRUE(SameAs(b_.received[2 * round + 1], 10, 1000 + round)) << round;
  }
  // Abort mid-message: close the sending channel while a large message is being written.
  a_.Send(MakeMessage(32u << 20, 77));
  a_.io->RunAndWait([&] {});
  a_.io->RunAndWait([&] { a_.engine->CloseChannel(a_.channel, Aborted("test closes")); });
  ASSERT_TRUE(WaitClosedByPeer(b_, std::chrono::seconds(30)));
  EngineCounters cb = CountersOnceGrantsEnd(b_);
  EXPECT_EQ(cb.windows_bound, 21u);
  EXPECT_EQ(cb.windows_bound, cb.windows_invalidated) << "every grant ended, aborted or not";
  EXPECT_FALSE(a_.failure.has_value());
  EXPECT_FALSE(b_.failure.has_value());
}

}  // namespace
}  // namespace bx::engine
