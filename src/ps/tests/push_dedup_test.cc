#include <gtest/gtest.h>

#include "ps/push_dedup.h"

namespace bx::ps {
namespace {

using V = PushDedup::Verdict;

TEST(PushDedup, InOrderAndOutOfOrderSequences) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 10});
  EXPECT_EQ(d.Check({7, 1}), V::kNew);
  d.MarkApplied({7, 1});
  EXPECT_EQ(d.Check({7, 1}), V::kDuplicate);
  EXPECT_EQ(d.Check({8, 1}), V::kNew) << "clients are independent";
  // 3 and 5 overtake 2.
  d.MarkApplied({7, 3});
  d.MarkApplied({7, 5});
  EXPECT_EQ(d.Check({7, 2}), V::kNew);
  EXPECT_EQ(d.Check({7, 3}), V::kDuplicate);
  EXPECT_EQ(d.Check({7, 4}), V::kNew);
  EXPECT_EQ(d.Check({7, 5}), V::kDuplicate);
  d.MarkApplied({7, 2});  // contiguous becomes 3
  auto exported = d.Export();
  ASSERT_EQ(exported.size(), 1u);
  EXPECT_EQ(exported[0].contiguous, 3u);
  EXPECT_EQ(exported[0].recent, (std::vector<uint64_t>{5}));
  d.MarkApplied({7, 4});  // contiguous absorbs 5
  exported = d.Export();
  EXPECT_EQ(exported[0].contiguous, 5u);
  EXPECT_TRUE(exported[0].recent.empty());
}

TEST(PushDedup, WindowBoundsMemory) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 10});
  EXPECT_EQ(d.Check({1, 8}), V::kNew);
  EXPECT_EQ(d.Check({1, 9}), V::kTooFarAhead);
  for (uint64_t s = 2; s <= 8; ++s) d.MarkApplied({1, s});  // 1 missing: 7 held
  EXPECT_EQ(d.Export()[0].recent.size(), 7u);
  EXPECT_EQ(d.Check({1, 9}), V::kTooFarAhead);
  d.MarkApplied({1, 1});
  EXPECT_EQ(d.Export()[0].recent.size(), 0u);
  EXPECT_EQ(d.Check({1, 16}), V::kNew);
}

TEST(PushDedup, EvictsTheLeastRecentlyActiveClient) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 2});
  d.MarkApplied({1, 1});
  d.MarkApplied({2, 1});
  d.MarkApplied({1, 2});  // client 2 is now the least recent
  d.MarkApplied({3, 1});
  EXPECT_EQ(d.client_count(), 2u);
  EXPECT_EQ(d.Check({1, 2}), V::kDuplicate);
  EXPECT_EQ(d.Check({3, 1}), V::kDuplicate);
  EXPECT_EQ(d.Check({2, 1}), V::kNew) << "forgotten";
}

TEST(PushDedup, ImportValidates) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 10});
  EXPECT_TRUE(d.Import({{1, 5, {7, 9}}}).ok());
  EXPECT_EQ(d.Check({1, 5}), V::kDuplicate);
  EXPECT_EQ(d.Check({1, 6}), V::kNew);
  EXPECT_EQ(d.Check({1, 7}), V::kDuplicate);
  EXPECT_EQ(d.Import({{1, 5, {6}}}).code(), StatusCode::kDataLoss);   // should be contiguous
  EXPECT_EQ(d.Import({{1, 5, {14}}}).code(), StatusCode::kDataLoss);  // beyond the window
  EXPECT_EQ(d.Import({{1, 5, {}}, {1, 6, {}}}).code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace bx::ps
