// WindowPool on the software NIC: grants, binds, invalidates and the pool's reuse, without a peer.
#include "engine/window_pool.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "alloc/testing/test_memory.h"
#include "bx/bemalloc.h"
#include "verbs/rc_connect.h"

namespace bx::engine {
namespace {

verbs::Device* g_pool_device = nullptr;

// Stands in for ibv_post_send: records what the chain would post.
std::vector<ibv_send_wr> g_posted;
int CapturePost(ibv_qp*, ibv_send_wr* wr, ibv_send_wr**) {
  for (; wr != nullptr; wr = wr->next) g_posted.push_back(*wr);
  return 0;
}

class WindowPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_pool_device = &test_support::InitTestMemory();
    auto qp = verbs::CreateRcQueuePair(g_pool_device->lib(), g_pool_device->context(),
                                       g_pool_device->pd(), {});
    ASSERT_TRUE(qp.ok()) << qp.status().ToString();
    qp_.emplace(std::move(qp).value());
  }

  Buffer Destination(size_t size) {
    auto b = Buffer::Allocate(size);
    EXPECT_TRUE(b.ok());
    return std::move(b).value();
  }

  std::optional<verbs::RcQueuePair> qp_;
};

TEST_F(WindowPoolTest, ProbesTheDeviceOnlyWhenWanted) {
  WindowPool wanted(qp_->qp(), g_pool_device->lib(), true);
  EXPECT_TRUE(wanted.enabled());
  EXPECT_EQ(wanted.allocated(), 1u) << "the probe allocates one window";
  WindowPool unwanted(qp_->qp(), g_pool_device->lib(), false);
  EXPECT_FALSE(unwanted.enabled());
  EXPECT_EQ(unwanted.allocated(), 0u);
}

TEST_F(WindowPoolTest, ABindCoversExactlyTheDestinationWithTheGrantsKey) {
  WindowPool pool(qp_->qp(), g_pool_device->lib(), true);
  Buffer dest = Destination(100 << 10);
  WindowPool::Grant grant = pool.Acquire(dest);
  ASSERT_GE(grant.window, 0);
  EXPECT_EQ(grant.mr, bemalloc::GetMR(dest.data())->handle);
  EXPECT_NE(grant.rkey, dest.rkey()) << "the peer gets the window's key, not the region's";
  flow_control::WorkRequestChain chain(4);
  auto& slot = chain.Prepare();
  pool.PrepareBind(slot, grant, reinterpret_cast<uint64_t>(dest.data()), dest.size());
  EXPECT_EQ(slot.wr.opcode, IBV_WR_BIND_MW);
  EXPECT_EQ(slot.wr.bind_mw.rkey, grant.rkey);
  EXPECT_EQ(slot.wr.bind_mw.bind_info.mr, grant.mr);
  EXPECT_EQ(slot.wr.bind_mw.bind_info.addr, reinterpret_cast<uint64_t>(dest.data()));
  EXPECT_EQ(slot.wr.bind_mw.bind_info.length, dest.size());
  EXPECT_EQ(slot.wr.bind_mw.bind_info.mw_access_flags, unsigned(IBV_ACCESS_REMOTE_WRITE));
  EXPECT_EQ(pool.bound(), 1u);
}

TEST_F(WindowPoolTest, AnInvalidatedWindowIsReusedWithAFreshKey) {
  WindowPool pool(qp_->qp(), g_pool_device->lib(), true);
  Buffer dest = Destination(64 << 10);
  WindowPool::Grant first = pool.Acquire(dest);
  ASSERT_GE(first.window, 0);
  // A second grant while the first is under way needs a window of its own.
  WindowPool::Grant other = pool.Acquire(dest);
  ASSERT_GE(other.window, 0);
  EXPECT_NE(other.window, first.window);
  EXPECT_EQ(pool.allocated(), 2u);

  pool.InvalidateForDelivery(uint32_t(first.window), /*channel=*/7);
  ASSERT_TRUE(pool.has_invalidations());
  flow_control::WorkRequestChain chain(4);
  pool.PrepareInvalidations(chain);
  EXPECT_FALSE(pool.has_invalidations());
  ASSERT_EQ(chain.pending(), 1u);
  // The only prepared slot is the one just taken: the chain is empty otherwise.
  EXPECT_EQ(chain.free_slots(), 3u);

  std::optional<ChannelId> released = pool.OnInvalidated(uint32_t(first.window));
  ASSERT_TRUE(released.has_value()) << "a delivery's invalidate releases its channel";
  EXPECT_EQ(*released, 7);
  EXPECT_EQ(pool.invalidated(), 1u);

  WindowPool::Grant again = pool.Acquire(dest);
  EXPECT_EQ(again.window, first.window) << "the invalidated window is reused";
  EXPECT_NE(again.rkey, first.rkey) << "every earlier key of a reused window is stale";
  EXPECT_EQ(pool.allocated(), 2u);
}

TEST_F(WindowPoolTest, InvalidatesNameTheCurrentKeyAndWaitForChainRoom) {
  WindowPool pool(qp_->qp(), g_pool_device->lib(), true);
  Buffer dest = Destination(64 << 10);
  std::vector<WindowPool::Grant> grants;
  for (int i = 0; i < 3; ++i) grants.push_back(pool.Acquire(dest));
  for (const auto& g : grants) pool.InvalidateForDelivery(uint32_t(g.window), 1);
  flow_control::WorkRequestChain chain(2);
  pool.PrepareInvalidations(chain);
  EXPECT_EQ(chain.free_slots(), 0u);
  EXPECT_TRUE(pool.has_invalidations()) << "the third waits for a slot";
  g_posted.clear();
  ASSERT_EQ(chain.PostPending(qp_->qp(), &CapturePost), 0);
  ASSERT_EQ(g_posted.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(g_posted[i].opcode, IBV_WR_LOCAL_INV);
    EXPECT_EQ(g_posted[i].invalidate_rkey, grants[i].rkey) << "the key the peer was granted";
  }
}

TEST_F(WindowPoolTest, AnAbortedDestinationIsFreedOnlyWhenItsInvalidateCompletes) {
  WindowPool pool(qp_->qp(), g_pool_device->lib(), true);
  const size_t size = 40 << 10;
  Buffer dest = Destination(size);
  const void* address = dest.data();
  WindowPool::Grant grant = pool.Acquire(dest);
  ASSERT_GE(grant.window, 0);
  pool.InvalidateAndFree(uint32_t(grant.window), std::move(dest));
  // Until the invalidate completes the peer may still write there: the memory is not reused.
  std::vector<Buffer> fresh;
  for (int i = 0; i < 32; ++i) {
    fresh.push_back(Destination(size));
    EXPECT_NE(fresh.back().data(), address) << "an aborted destination was freed too early";
  }
  EXPECT_FALSE(pool.OnInvalidated(uint32_t(grant.window)).has_value())
      << "an abort delivers nothing";
  bool reused = false;
  for (int i = 0; i < 32 && !reused; ++i) {
    fresh.push_back(Destination(size));
    reused = fresh.back().data() == address;
  }
  EXPECT_TRUE(reused) << "the invalidate's completion frees the destination";
}

TEST_F(WindowPoolTest, ClearDeallocatesEveryWindow) {
  WindowPool pool(qp_->qp(), g_pool_device->lib(), true);
  Buffer dest = Destination(64 << 10);
  WindowPool::Grant grant = pool.Acquire(dest);
  pool.InvalidateForDelivery(uint32_t(grant.window), 3);
  pool.Clear();
  EXPECT_EQ(pool.allocated(), 0u);
  EXPECT_FALSE(pool.has_invalidations());
}

}  // namespace
}  // namespace bx::engine
