#include "flow_control/work_request_chain.h"

#include <gtest/gtest.h>

#include <vector>

namespace bx::flow_control {
namespace {

// A stand-in for ibv_post_send that records each call's list.
std::vector<std::vector<ibv_send_wr>> g_posts;
int g_fail_with = 0;

int g_accept_before_failing = 0;

int FakePost(ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (g_fail_with != 0) {
    for (int i = 0; i < g_accept_before_failing && wr != nullptr; ++i) wr = wr->next;
    *bad = wr;
    return g_fail_with;
  }
  g_posts.emplace_back();
  for (; wr != nullptr; wr = wr->next) g_posts.back().push_back(*wr);
  return 0;
}

TEST(WorkRequestChainTest, PendingRequestsGoOutInOneCallWithOnlyTheLastSignalled) {
  g_posts.clear();
  WorkRequestChain chain(8);
  for (int i = 0; i < 5; ++i) chain.Prepare().wr.opcode = IBV_WR_SEND;
  EXPECT_EQ(chain.pending(), 5u);
  EXPECT_EQ(chain.free_slots(), 3u);
  ASSERT_EQ(chain.PostPending(nullptr, FakePost), 0);
  ASSERT_EQ(g_posts.size(), 1u);
  ASSERT_EQ(g_posts[0].size(), 5u);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(g_posts[0][size_t(i)].send_flags & IBV_SEND_SIGNALED);
  EXPECT_TRUE(g_posts[0][4].send_flags & IBV_SEND_SIGNALED);
  EXPECT_EQ(chain.in_flight(), 5u);
  EXPECT_EQ(chain.pending(), 0u);
  EXPECT_EQ(chain.batches(), 1u);
  EXPECT_EQ(chain.requests_posted(), 5u);
}

TEST(WorkRequestChainTest, OneCompletionRetiresTheWholeBatchInOrder) {
  g_posts.clear();
  WorkRequestChain chain(4);
  int cookies[4];
  for (int i = 0; i < 4; ++i) chain.Prepare().cookie = &cookies[i];
  EXPECT_EQ(chain.free_slots(), 0u) << "never more than the send queue holds";
  ASSERT_EQ(chain.PostPending(nullptr, FakePost), 0);
  std::vector<void*> retired;
  chain.RetireThrough(g_posts[0].back().wr_id,
                      [&](WorkRequestChain::Slot& s) { retired.push_back(s.cookie); });
  ASSERT_EQ(retired.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(retired[size_t(i)], &cookies[i]);
  EXPECT_EQ(chain.free_slots(), 4u);
  // The ring wraps: sequence numbers keep growing, slots are reused.
  for (int round = 0; round < 10; ++round) {
    chain.Prepare();
    chain.Prepare();
    ASSERT_EQ(chain.PostPending(nullptr, FakePost), 0);
    int n = 0;
    chain.RetireThrough(g_posts.back().back().wr_id, [&](WorkRequestChain::Slot&) { ++n; });
    EXPECT_EQ(n, 2);
  }
}

TEST(WorkRequestChainTest, FailedPostLeavesRequestsPendingAndDropAllReturnsThem) {
  WorkRequestChain chain(4);
  chain.Prepare();
  chain.Prepare();
  chain.Prepare();
  g_fail_with = ENOMEM;
  g_accept_before_failing = 1;  // the NIC took the first request, rejected the second
  EXPECT_EQ(chain.PostPending(nullptr, FakePost), ENOMEM);
  g_fail_with = 0;
  g_accept_before_failing = 0;
  EXPECT_EQ(chain.in_flight(), 1u);
  EXPECT_EQ(chain.pending(), 2u);
  int dropped = 0;
  chain.DropAll([&](WorkRequestChain::Slot&) { ++dropped; });
  EXPECT_EQ(dropped, 3);
  EXPECT_EQ(chain.free_slots(), 4u);
}

}  // namespace
}  // namespace bx::flow_control
