// Bounded tables (docs/PS.md "Bounded tables"): least-recently-pushed eviction against a
// reference model, the bound after every push, evicted rows read as new, validation, and the
// recency order carried by snapshots (new format and the old one).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <list>
#include <map>
#include <unordered_map>

#include "ps/shard_state.h"
#include "ps/table.h"
#include "ps/workload.h"

namespace bx::ps {
namespace bounded_table_test {

TableConfig Bounded(uint64_t max_rows, uint64_t max_bytes = 0, uint32_t dim = 4) {
  TableConfig c;
  c.id = 1;
  c.dim = dim;
  c.init.kind = InitializerKind::kConstant;
  c.init.value = 0.5f;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.max_rows = max_rows;
  c.max_bytes = max_bytes;
  return c;
}

std::unique_ptr<Table> Make(const TableConfig& c) {
  auto t = Table::Create(c);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

Status Push(Table& t, std::vector<uint64_t> keys, float g = 1.0f) {
  std::vector<float> grads(keys.size() * t.dim(), g);
  return t.Push(keys, grads);
}

// Keys in the table's order (ForEachRow: least recently pushed first), with their state.
std::vector<std::pair<uint64_t, std::vector<float>>> Rows(const Table& t) {
  std::vector<std::pair<uint64_t, std::vector<float>>> rows;
  t.ForEachRow([&](uint64_t key, std::span<const float> s) {
    rows.emplace_back(key, std::vector<float>(s.begin(), s.end()));
  });
  return rows;
}
std::vector<uint64_t> Keys(const Table& t) {
  std::vector<uint64_t> keys;
  for (auto& [key, state] : Rows(t)) keys.push_back(key);
  return keys;
}

TEST(BoundedTable, EvictsTheLeastRecentlyPushedRow) {
  auto t = Make(Bounded(3));
  ASSERT_TRUE(Push(*t, {1, 2, 3}).ok());
  ASSERT_TRUE(Push(*t, {1}).ok());  // 1 is now the newest: 2 is the oldest
  ASSERT_TRUE(Push(*t, {4}).ok());
  EXPECT_EQ(Keys(*t), (std::vector<uint64_t>{3, 1, 4}));
  EXPECT_EQ(t->row_count(), 3u);
  EXPECT_EQ(t->evicted(), 1u);
  // Fetches do not count as use: fetching 3 leaves it the oldest.
  std::vector<float> v(4);
  ASSERT_TRUE(t->Fetch(std::vector<uint64_t>{3}, std::span<float>(v)).ok());
  ASSERT_TRUE(Push(*t, {5}).ok());
  EXPECT_EQ(Keys(*t), (std::vector<uint64_t>{1, 4, 5}));
  EXPECT_EQ(t->evicted(), 2u);
}

TEST(BoundedTable, AnEvictedRowIsReadAsNeverPushed) {
  auto t = Make(Bounded(1));
  ASSERT_TRUE(Push(*t, {7}).ok());
  std::vector<float> v(4);
  ASSERT_TRUE(t->Fetch(std::vector<uint64_t>{7}, std::span<float>(v)).ok());
  EXPECT_NE(v[0], 0.5f) << "pushed: no longer the initial value";
  ASSERT_TRUE(Push(*t, {8}).ok());
  ASSERT_TRUE(t->Fetch(std::vector<uint64_t>{7}, std::span<float>(v)).ok());
  EXPECT_EQ(v, std::vector<float>(4, 0.5f));
  // Pushed again, it starts from a new row (initial weights and accumulator), as a new key.
  auto fresh = Make(Bounded(1));
  ASSERT_TRUE(Push(*t, {7}).ok());
  ASSERT_TRUE(Push(*fresh, {7}).ok());
  EXPECT_EQ(Rows(*t), Rows(*fresh));
}

TEST(BoundedTable, WithinAPushAKeyCountsAtItsLastOccurrence) {
  auto t = Make(Bounded(2));
  ASSERT_TRUE(Push(*t, {1, 2, 1}).ok());
  ASSERT_TRUE(Push(*t, {3}).ok());
  EXPECT_EQ(Keys(*t), (std::vector<uint64_t>{1, 3}));
  // A push of more keys than the bound keeps its last ones.
  ASSERT_TRUE(Push(*t, {10, 11, 12, 13}).ok());
  EXPECT_EQ(Keys(*t), (std::vector<uint64_t>{12, 13}));
  EXPECT_EQ(t->evicted(), 5u);
}

TEST(BoundedTable, ARefusedPushChangesNeitherRowsNorOrder) {
  TableConfig c = Bounded(2);
  c.optimizer.kind = OptimizerKind::kSgd;
  c.optimizer.learning_rate = 1e38f;
  auto t = Make(c);
  ASSERT_TRUE(Push(*t, {1, 2}, 1e-38f).ok());
  EXPECT_FALSE(Push(*t, {3, 1}, 1e30f).ok());  // overflows: nothing applied
  EXPECT_EQ(Keys(*t), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(t->evicted(), 0u);
}

// A stream of pushes of random sizes over a key space larger than the bound, against a
// reference LRU (std::list): the same rows in the same order after every push, never more
// than the bound, and every eviction counted.
TEST(BoundedTable, MatchesAReferenceModelAndNeverExceedsTheBound) {
  const TableConfig c = Bounded(0, /*max_bytes=*/8 * 1024);  // 8 + 8*4 bytes a row: 204 rows
  auto t = Make(c);
  ASSERT_EQ(t->row_limit(), 8u * 1024 / (8 + 8 * 4));
  std::list<uint64_t> model;  // oldest first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  uint64_t model_evicted = 0;
  Rng rng(5);
  for (int push = 0; push < 2000; ++push) {
    std::vector<uint64_t> keys(1 + rng.Next() % 40);
    for (uint64_t& k : keys) k = rng.Next() % 600;
    ASSERT_TRUE(Push(*t, keys).ok());
    for (uint64_t k : keys) {
      if (auto it = where.find(k); it != where.end()) model.erase(it->second);
      where[k] = model.insert(model.end(), k);
    }
    while (model.size() > t->row_limit()) {
      where.erase(model.front());
      model.pop_front();
      ++model_evicted;
    }
    ASSERT_LE(t->row_count(), t->row_limit());
    ASSERT_LE(t->RowBytes(t->row_count()), c.max_bytes);
    ASSERT_EQ(Keys(*t), std::vector<uint64_t>(model.begin(), model.end())) << "push " << push;
    ASSERT_EQ(t->evicted(), model_evicted);
  }
  EXPECT_GT(model_evicted, 10000u);
  // The rows kept their values through the moves eviction makes inside the stripes: each
  // row, fetched, is what its own pushes made it (a copy of it pushed alone agrees).
  for (auto& [key, state] : Rows(*t)) {
    std::vector<float> v(4);
    ASSERT_TRUE(t->Fetch(std::vector<uint64_t>{key}, std::span<float>(v)).ok());
    EXPECT_TRUE(std::equal(v.begin(), v.end(), state.begin()));
  }
}

TEST(BoundedTable, BoundsAreValidated) {
  auto refused = [](const TableConfig& c) {
    Status s = Table::ValidateConfig(c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  // Adagrad dim 4: 8 + 8 * 4 = 40 bytes a row.
  EXPECT_NE(refused(Bounded(0, 39)).find("smaller than one row (40 bytes"), std::string::npos);
  EXPECT_TRUE(Table::ValidateConfig(Bounded(0, 40)).ok());
  EXPECT_EQ(Table::RowLimit(Bounded(0, 40)), 1u);
  EXPECT_EQ(Table::RowLimit(Bounded(5, 400)), 5u);  // the tighter bound
  EXPECT_EQ(Table::RowLimit(Bounded(50, 400)), 10u);
  TableConfig dense = Bounded(4);
  dense.kind = TableKind::kDense;
  dense.dense_rows = 10;
  EXPECT_NE(refused(dense).find("embedding tables only"), std::string::npos);
  EXPECT_NE(refused(Bounded(kMaxBoundedRows + 1)).find("above"), std::string::npos);
  EXPECT_TRUE(Table::ValidateConfig(Bounded(kMaxBoundedRows)).ok());
}

// Feeds the same pushes to a state and to its snapshot-restored copy, and to a control
// rebuilt from the same rows in key order (what a snapshot that lost the recency would load).
void PushStream(ShardState& s, uint64_t seed, int pushes) {
  Rng rng(seed);
  for (int i = 0; i < pushes; ++i) {
    PushRequest p;
    p.table_id = 1;
    p.dim = 4;
    p.keys.resize(1 + rng.Next() % 30);
    for (uint64_t& k : p.keys) k = rng.Next() % 400;
    p.gradients.assign(p.keys.size() * 4, 0.01f * float(i % 7));
    ASSERT_TRUE(s.ApplyPush(p).ok());
  }
}

TEST(BoundedTable, ASnapshotCarriesTheRecencySoEvictionsStayTheSame) {
  ShardState a, control;
  ASSERT_TRUE(a.CreateTable(Bounded(100)).ok());
  PushStream(a, 1, 300);
  Result<std::vector<std::byte>> bytes = a.Encode();
  ASSERT_TRUE(bytes.ok());
  Result<std::unique_ptr<ShardState>> b = ShardState::Decode(*bytes);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(Rows(*(*b)->table(1)), Rows(*a.table(1)));
  EXPECT_EQ((*b)->table(1)->evicted(), a.table(1)->evicted());
  // The control: the same rows, inserted in key order.
  ASSERT_TRUE(control.CreateTable(Bounded(100)).ok());
  auto rows = Rows(*a.table(1));
  std::sort(rows.begin(), rows.end());
  for (auto& [key, state] : rows) ASSERT_TRUE(control.table(1)->InsertRow(key, state).ok());

  // Few enough pushes that some rows from before the snapshot survive them: which ones depends
  // on the order they were in.
  PushStream(a, 2, 8);
  PushStream(**b, 2, 8);
  PushStream(control, 2, 8);
  EXPECT_EQ(Rows(*(*b)->table(1)), Rows(*a.table(1)));
  EXPECT_EQ((*b)->table(1)->evicted(), a.table(1)->evicted());
  auto sorted = [](std::vector<std::pair<uint64_t, std::vector<float>>> r) {
    std::sort(r.begin(), r.end());
    return r;
  };
  EXPECT_NE(sorted(Rows(*control.table(1))), sorted(Rows(*a.table(1))))
      << "the control should evict other rows: the test could not tell a lost order";
  // A copy (what catch-up and checkpoints encode) carries it too.
  Result<std::unique_ptr<ShardState>> copy = a.Copy();
  ASSERT_TRUE(copy.ok());
  PushStream(a, 3, 100);
  PushStream(**copy, 3, 100);
  EXPECT_EQ(Rows(*(*copy)->table(1)), Rows(*a.table(1)));
}

// The word checksum of version 2 and 3 (snapshot.cc), to write an old file by hand.
uint64_t WordChecksum(const std::vector<char>& body) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t w) { h = (std::rotl(h, 31) ^ w) * 0x9e3779b97f4a7c15ull; };
  for (size_t i = 0; i < body.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, body.data() + i, std::min<size_t>(8, body.size() - i));
    mix(w);
  }
  mix(body.size());
  return h;
}

// Version 2 (before bounds) still loads, as an unbounded table, and a restore into a bounded
// table of the cluster file (Rebound) keeps its most recently pushed rows within the bound.
TEST(BoundedTable, AVersionTwoSnapshotLoadsAndCanBeBounded) {
  ShardState old;
  ASSERT_TRUE(old.CreateTable(Bounded(0)).ok());  // unbounded
  PushStream(old, 4, 50);
  Result<std::vector<std::byte>> bytes = old.Encode();
  ASSERT_TRUE(bytes.ok());
  std::vector<char> file(reinterpret_cast<const char*>(bytes->data()),
                         reinterpret_cast<const char*>(bytes->data()) + bytes->size());
  std::vector<char> body(file.begin() + 32, file.end());
  // The table's bounds and evictions, version 4's ttl, admission and expiries, and its clock.
  body.erase(body.begin() + 96, body.begin() + 144);
  body.erase(body.begin() + 24, body.begin() + 32);
  const uint32_t version = 2;
  const uint64_t size = body.size(), sum = WordChecksum(body);
  std::memcpy(file.data() + 8, &version, 4);
  std::memcpy(file.data() + 16, &size, 8);
  std::memcpy(file.data() + 24, &sum, 8);
  file.resize(32);
  file.insert(file.end(), body.begin(), body.end());
  Result<std::unique_ptr<ShardState>> loaded =
      ShardState::Decode(std::as_bytes(std::span<const char>(file)));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto sorted = [](std::vector<std::pair<uint64_t, std::vector<float>>> r) {
    std::sort(r.begin(), r.end());
    return r;
  };
  EXPECT_EQ(sorted(Rows(*(*loaded)->table(1))), sorted(Rows(*old.table(1))));
  EXPECT_EQ((*loaded)->table(1)->row_limit(), 0u);
  const uint64_t rows = old.table(1)->row_count();
  ASSERT_TRUE((*loaded)->Rebound(1, rows / 2, 0).ok());
  EXPECT_EQ((*loaded)->table(1)->row_count(), rows / 2);
  EXPECT_EQ((*loaded)->table(1)->evicted(), rows - rows / 2);
}

}  // namespace bounded_table_test
}  // namespace bx::ps
