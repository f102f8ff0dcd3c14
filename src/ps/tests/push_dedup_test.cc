#include <gtest/gtest.h>

#include "ps/push_dedup.h"

namespace bx::ps {
namespace {

using V = PushDedup::Verdict;

// A client id of generation `generation` (its upper 32 bits).
constexpr uint64_t Id(uint64_t generation, uint64_t low) {
  return generation << 32 | low;
}

TEST(PushDedup, InOrderAndOutOfOrderSequences) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 10});
  EXPECT_EQ(d.Check({7, 1}, 0), V::kNew);
  d.MarkApplied({7, 1}, 0);
  EXPECT_EQ(d.Check({7, 1}, 0), V::kDuplicate);
  EXPECT_EQ(d.Check({8, 1}, 0), V::kNew) << "clients are independent";
  // 3 and 5 overtake 2.
  d.MarkApplied({7, 3}, 0);
  d.MarkApplied({7, 5}, 0);
  EXPECT_EQ(d.recent_count(), 2u);
  EXPECT_EQ(d.Check({7, 2}, 0), V::kNew);
  EXPECT_EQ(d.Check({7, 3}, 0), V::kDuplicate);
  EXPECT_EQ(d.Check({7, 4}, 0), V::kNew);
  EXPECT_EQ(d.Check({7, 5}, 0), V::kDuplicate);
  d.MarkApplied({7, 2}, 0);  // contiguous becomes 3
  auto exported = d.Export().clients;
  ASSERT_EQ(exported.size(), 1u);
  EXPECT_EQ(exported[0].contiguous, 3u);
  EXPECT_EQ(exported[0].recent, (std::vector<uint64_t>{5}));
  d.MarkApplied({7, 4}, 0);  // contiguous absorbs 5
  exported = d.Export().clients;
  EXPECT_EQ(exported[0].contiguous, 5u);
  EXPECT_TRUE(exported[0].recent.empty());
  EXPECT_EQ(d.recent_count(), 0u);
}

TEST(PushDedup, WindowBoundsMemory) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 10});
  EXPECT_EQ(d.Check({1, 8}, 0), V::kNew);
  EXPECT_EQ(d.Check({1, 9}, 0), V::kTooFarAhead);
  for (uint64_t s = 2; s <= 8; ++s) d.MarkApplied({1, s}, 0);  // 1 missing: 7 held
  EXPECT_EQ(d.Export().clients[0].recent.size(), 7u);
  EXPECT_EQ(d.Check({1, 9}, 0), V::kTooFarAhead);
  d.MarkApplied({1, 1}, 0);
  EXPECT_EQ(d.Export().clients[0].recent.size(), 0u);
  EXPECT_EQ(d.Check({1, 16}, 0), V::kNew);
}

// Out-of-order sequences are bounded across clients; the in-order push always gets through.
TEST(PushDedup, OutOfOrderSequencesAreBoundedAcrossClients) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 10, .max_recent = 3});
  d.MarkApplied({1, 3}, 0);
  d.MarkApplied({2, 3}, 0);
  d.MarkApplied({2, 4}, 0);
  EXPECT_EQ(d.recent_count(), 3u);
  EXPECT_EQ(d.Check({1, 5}, 0), V::kRecordFull);
  EXPECT_EQ(d.Check({3, 2}, 0), V::kRecordFull);
  EXPECT_EQ(d.Check({3, 1}, 0), V::kNew);
  EXPECT_EQ(d.Check({1, 1}, 0), V::kNew);
  d.MarkApplied({1, 1}, 0);
  EXPECT_EQ(d.Check({1, 2}, 0), V::kNew) << "in order";
  d.MarkApplied({1, 2}, 0);  // absorbs 3: room again
  EXPECT_EQ(d.recent_count(), 2u);
  EXPECT_EQ(d.Check({1, 5}, 0), V::kNew);
}

TEST(PushDedup, EvictsOneOffClientsBeforeRepeatClients) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 3});
  d.MarkApplied({Id(5, 1), 1}, 0);
  d.MarkApplied({Id(5, 1), 2}, 0);  // a repeat client, then quiet
  for (uint64_t i = 2; i < 100; ++i) d.MarkApplied({Id(6, i), 1}, 0);  // a flood of one-offs
  EXPECT_EQ(d.client_count(), 3u);
  EXPECT_EQ(d.evictions(), 96u);
  EXPECT_EQ(d.Check({Id(5, 1), 2}, 0), V::kDuplicate) << "the repeat client is still known";
  EXPECT_EQ(d.Check({Id(5, 1), 3}, 0), V::kNew);
  // Among repeat clients, the least recently active goes first.
  d.MarkApplied({Id(7, 1), 1}, 0);
  d.MarkApplied({Id(7, 1), 2}, 0);
  d.MarkApplied({Id(7, 2), 1}, 0);
  d.MarkApplied({Id(7, 2), 2}, 0);  // three repeat clients: 5.1 is the least recent
  d.MarkApplied({Id(7, 3), 1}, 0);
  EXPECT_FALSE(d.Knows(Id(5, 1)));
  EXPECT_TRUE(d.Knows(Id(7, 1)));
}

// The property the record exists for: an evicted client's pushes, retries included, are
// refused rather than applied again, and a new session gets through.
TEST(PushDedup, EvictedClientsAreExpiredNotForgotten) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 2});
  const uint64_t quiet = Id(100, 7);
  for (uint64_t s = 1; s <= 5; ++s) d.MarkApplied({quiet, s}, 42);
  d.MarkApplied({Id(100, 8), 1}, 0);
  d.MarkApplied({Id(100, 8), 2}, 0);
  d.MarkApplied({Id(101, 9), 1}, 0);  // evicts the quiet client, the least recent repeat one
  EXPECT_FALSE(d.Knows(quiet));
  EXPECT_EQ(d.min_generation(), 101u);
  EXPECT_EQ(d.Check({quiet, 3}, 42), V::kExpired) << "an old retry";
  EXPECT_EQ(d.Check({quiet, 6}, 42), V::kExpired) << "its next push";
  EXPECT_EQ(d.Check({Id(100, 99), 1}, 0), V::kExpired) << "an unknown id below the floor";
  EXPECT_EQ(d.Check({Id(101, 10), 1}, 0), V::kNew) << "a new session at the floor";
  EXPECT_EQ(d.Check({Id(101, 9), 1}, 0), V::kDuplicate) << "known ids are unaffected";
}

TEST(PushDedup, AnIdIsBoundToTheKeyOfItsFirstPush) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 10});
  d.MarkApplied({1, 1}, 0xabc);
  EXPECT_EQ(d.Check({1, 1}, 0xdef), V::kWrongKey) << "a duplicate under another key";
  EXPECT_EQ(d.Check({1, 2}, 0xdef), V::kWrongKey) << "a new push under another key";
  EXPECT_EQ(d.Check({1, 2}, 0xabc), V::kNew);
}

// Replicas stay identical through a snapshot: the imported record evicts in the same order.
TEST(PushDedup, ExportImportKeepsTheEvictionOrder) {
  PushDedup a(PushDedup::Options{.window = 8, .max_clients = 4});
  a.MarkApplied({Id(1, 1), 1}, 11);
  a.MarkApplied({Id(1, 2), 1}, 12);
  a.MarkApplied({Id(1, 2), 3}, 12);
  a.MarkApplied({Id(1, 3), 1}, 13);
  a.MarkApplied({Id(1, 1), 2}, 11);
  PushDedup b(PushDedup::Options{.window = 8, .max_clients = 4});
  ASSERT_TRUE(b.Import(a.Export()).ok());
  EXPECT_EQ(b.recent_count(), a.recent_count());
  for (uint64_t i = 10; i < 16; ++i) {
    a.MarkApplied({Id(2, i), 1}, i);
    b.MarkApplied({Id(2, i), 1}, i);
    const PushDedup::Record ra = a.Export(), rb = b.Export();
    ASSERT_EQ(ra.min_generation, rb.min_generation);
    ASSERT_EQ(ra.clients.size(), rb.clients.size());
    for (size_t c = 0; c < ra.clients.size(); ++c) {
      EXPECT_EQ(ra.clients[c].client_id, rb.clients[c].client_id) << "after " << i;
      EXPECT_EQ(ra.clients[c].key, rb.clients[c].key);
    }
  }
  EXPECT_EQ(b.Check({Id(1, 1), 3}, 99), V::kWrongKey) << "keys come through the snapshot";
}

TEST(PushDedup, ImportValidates) {
  PushDedup d(PushDedup::Options{.window = 8, .max_clients = 2});
  EXPECT_TRUE(d.Import({0, {{1, 0, 5, {7, 9}}}}).ok());
  EXPECT_EQ(d.Check({1, 5}, 0), V::kDuplicate);
  EXPECT_EQ(d.Check({1, 6}, 0), V::kNew);
  EXPECT_EQ(d.Check({1, 7}, 0), V::kDuplicate);
  EXPECT_EQ(d.recent_count(), 2u);
  EXPECT_EQ(d.Import({0, {{1, 0, 5, {6}}}}).code(), StatusCode::kDataLoss);   // contiguous
  EXPECT_EQ(d.Import({0, {{1, 0, 5, {14}}}}).code(), StatusCode::kDataLoss);  // beyond window
  EXPECT_EQ(d.Import({0, {{1, 0, 5, {}}, {1, 0, 6, {}}}}).code(), StatusCode::kDataLoss);
  EXPECT_EQ(d.Import({0, {{1, 0, 1, {}}, {2, 0, 1, {}}, {3, 0, 1, {}}}}).code(),
            StatusCode::kDataLoss)
      << "more clients than the bound";
  EXPECT_EQ(d.Import({(uint64_t{1} << 32) + 1, {}}).code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace bx::ps
