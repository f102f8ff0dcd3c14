#include "flow_control/fragment_scheduler.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>

namespace bx::flow_control {
namespace {

// Drives the scheduler the way the engine does: each flow has a queue of unit sizes (a large
// message = several fragment-sized units); a visit sends small units up to the deficit, or one
// fragment. Returns the order of (flow, bytes) sent.
std::vector<std::pair<uint32_t, uint32_t>> Drive(FragmentScheduler& s,
                                                 std::map<uint32_t, std::deque<uint32_t>> work,
                                                 uint32_t fragment) {
  std::vector<std::pair<uint32_t, uint32_t>> sent;
  for (auto& [flow, units] : work) s.Activate(flow);
  while (!s.empty()) {
    uint32_t flow = s.Current();
    auto& units = work[flow];
    if (units.empty()) {
      s.Deactivate();
      continue;
    }
    if (!s.Spend(units.front())) {
      s.EndVisit();
      continue;
    }
    bool was_fragment = units.front() == fragment;
    sent.emplace_back(flow, units.front());
    units.pop_front();
    if (units.empty()) {
      s.Deactivate();
    } else if (was_fragment) {
      s.EndVisit();
    }
  }
  return sent;
}

TEST(FragmentScheduler, LargeMessagesInterleaveFragmentByFragment) {
  FragmentScheduler s(1000);
  auto sent = Drive(s, {{1, {1000, 1000, 1000}}, {2, {1000, 1000, 1000}}}, 1000);
  std::vector<uint32_t> flows;
  for (auto& [flow, bytes] : sent) flows.push_back(flow);
  EXPECT_EQ(flows, (std::vector<uint32_t>{1, 2, 1, 2, 1, 2}));
}

TEST(FragmentScheduler, SmallMessagesGetTheSameByteShareAsFragments) {
  FragmentScheduler s(1000);
  std::deque<uint32_t> small(100, 100), large(10, 1000);
  auto sent = Drive(s, {{1, large}, {2, small}}, 1000);
  // In every prefix the two flows' bytes differ by at most one quantum.
  int64_t balance = 0;
  int64_t worst = 0;
  size_t i = 0;
  for (; i < sent.size(); ++i) {
    balance += sent[i].first == 1 ? sent[i].second : -int64_t(sent[i].second);
    worst = std::max(worst, std::abs(balance));
    if (sent[i].first == 1 && i > 0 && sent[i - 1].first == 1 && sent[i].second == 1000)
      ADD_FAILURE() << "two fragments of flow 1 in one visit at " << i;
  }
  EXPECT_LE(worst, 1000);
  EXPECT_EQ(sent.size(), 110u);
}

TEST(FragmentScheduler, IdleFlowsForgetTheirDeficit) {
  FragmentScheduler s(1000);
  s.Activate(5);
  EXPECT_EQ(s.Current(), 5u);
  EXPECT_TRUE(s.Spend(10));
  s.Deactivate();
  EXPECT_TRUE(s.empty());
  s.Activate(5);
  EXPECT_EQ(s.Current(), 5u);
  EXPECT_FALSE(s.Spend(1001)) << "990 left over must not carry into a new busy period";
  EXPECT_TRUE(s.Spend(1000));
  EXPECT_EQ(s.rounds(), 2u);
}

TEST(FragmentScheduler, RemoveTakesAFlowOutWherever) {
  FragmentScheduler s(10);
  for (uint32_t f : {1, 2, 3}) s.Activate(f);
  s.Remove(2);
  s.Activate(1);  // already active: no duplicate
  EXPECT_EQ(s.active_flows(), 2u);
  EXPECT_EQ(s.Current(), 1u);
  s.EndVisit();
  EXPECT_EQ(s.Current(), 3u);
}

// The ring is a list through the flow states: removing its tail, its head or its only flow leaves
// a list that later activations append to in order.
TEST(FragmentScheduler, RemoveKeepsTheRingsOrderAtItsEnds) {
  FragmentScheduler s(10);
  for (uint32_t f : {1, 2, 3}) s.Activate(f);
  s.Remove(3);  // the tail
  s.Activate(4);
  s.Remove(1);  // the head
  s.Remove(7);  // never active: nothing
  EXPECT_EQ(s.active_flows(), 2u);
  EXPECT_EQ(s.Current(), 2u);
  s.EndVisit();
  EXPECT_EQ(s.Current(), 4u);
  s.EndVisit();
  EXPECT_EQ(s.Current(), 2u);
  s.Remove(2);
  s.Remove(4);
  EXPECT_TRUE(s.empty());
  s.Activate(5);
  s.Activate(6);
  EXPECT_EQ(s.Current(), 5u);
  s.Deactivate();
  EXPECT_EQ(s.Current(), 6u);
  EXPECT_EQ(s.active_flows(), 1u);
}

}  // namespace
}  // namespace bx::flow_control
