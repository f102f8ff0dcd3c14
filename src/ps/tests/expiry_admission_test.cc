// Expiry (TableConfig::ttl_seconds) and admission (admit_after_pushes), docs/PS.md "Expiry and
// admission": rows expire against the push clock carried by the pushes, admission counts are
// bounded and deterministic, refused pushes leave no trace, and snapshots carry the stamps, the
// clock and the counts so that a copy continues exactly as the original does.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "bx/ps/cluster.h"
#include "ps/shard_state.h"
#include "ps/table.h"

namespace bx::ps {
namespace expiry_admission_test {

constexpr uint64_t kSecond = 1000;  // ms

TableConfig Embedding(uint32_t id, uint64_t ttl_seconds, uint32_t admit_after_pushes = 0) {
  TableConfig c;
  c.id = id;
  c.dim = 2;
  c.init.kind = InitializerKind::kConstant;
  c.init.value = 0.5f;
  c.optimizer.kind = OptimizerKind::kSgd;
  c.optimizer.learning_rate = 0.25f;
  c.ttl_seconds = ttl_seconds;
  c.admit_after_pushes = admit_after_pushes;
  return c;
}

PushRequest At(uint64_t stamp_ms, uint32_t table, std::vector<uint64_t> keys, float g = 1.0f) {
  PushRequest p;
  p.table_id = table;
  p.dim = 2;
  p.gradients.assign(keys.size() * 2, g);
  p.keys = std::move(keys);
  p.stamp_ms = stamp_ms;
  return p;
}

std::map<uint64_t, std::pair<uint64_t, std::vector<float>>> Rows(const Table& t) {
  std::map<uint64_t, std::pair<uint64_t, std::vector<float>>> rows;
  t.ForEachRowPushedAt([&](uint64_t key, uint64_t pushed_ms, std::span<const float> s) {
    rows[key] = {pushed_ms, std::vector<float>(s.begin(), s.end())};
  });
  return rows;
}

float Weight(const ShardState& s, uint32_t table, uint64_t key) {
  std::vector<float> v(2);
  EXPECT_TRUE(s.table(table)->Fetch(std::vector<uint64_t>{key}, std::span<float>(v)).ok());
  return v[0];
}

TEST(Expiry, ARowNotPushedForTheTtlIsEvictedAtThePushThatExpiresIt) {
  ShardState s;
  ASSERT_TRUE(s.CreateTable(Embedding(1, 10)).ok());
  ASSERT_TRUE(s.ApplyPush(At(100 * kSecond, 1, {1})).ok());
  ASSERT_TRUE(s.ApplyPush(At(105 * kSecond, 1, {2})).ok());
  ASSERT_TRUE(s.ApplyPush(At(110 * kSecond - 1, 1, {3})).ok());
  EXPECT_EQ(s.table(1)->row_count(), 3u) << "1 is 1 ms short of its ttl";
  ASSERT_TRUE(s.ApplyPush(At(110 * kSecond, 1, {3})).ok());
  EXPECT_EQ(s.table(1)->row_count(), 2u);
  EXPECT_EQ(s.table(1)->expired(), 1u);
  EXPECT_EQ(s.table(1)->evicted(), 0u) << "expiries are counted apart";
  EXPECT_EQ(Weight(s, 1, 1), 0.5f) << "an expired row reads as never pushed";
  EXPECT_EQ(Weight(s, 1, 2), 0.25f);
  EXPECT_EQ(s.clock_ms, 110 * kSecond);
}

TEST(Expiry, AnExpiredKeyOfThePushStartsAgainFromItsInitialValue) {
  ShardState s;
  ASSERT_TRUE(s.CreateTable(Embedding(1, 10)).ok());
  ASSERT_TRUE(s.ApplyPush(At(1 * kSecond, 1, {7, 7})).ok());
  EXPECT_EQ(Weight(s, 1, 7), 0.0f);
  ASSERT_TRUE(s.ApplyPush(At(11 * kSecond, 1, {7})).ok());
  EXPECT_EQ(Weight(s, 1, 7), 0.25f) << "one step from 0.5, not a third from 0";
  EXPECT_EQ(s.table(1)->expired(), 1u);
}

// The clock is the shard's: a push to one table expires the rows of another, and a stamp
// lower than the clock (a new primary whose clock is behind) does not move it back.
TEST(Expiry, PushesToAnyTableMoveTheShardsClockWhichNeverGoesBack) {
  ShardState s;
  ASSERT_TRUE(s.CreateTable(Embedding(1, 10)).ok());
  ASSERT_TRUE(s.CreateTable(Embedding(2, 0)).ok());
  ASSERT_TRUE(s.ApplyPush(At(50 * kSecond, 1, {1})).ok());
  ASSERT_TRUE(s.ApplyPush(At(60 * kSecond, 2, {9})).ok());
  EXPECT_EQ(s.table(1)->row_count(), 0u);
  ASSERT_TRUE(s.ApplyPush(At(61 * kSecond, 1, {1})).ok());
  ASSERT_TRUE(s.ApplyPush(At(5 * kSecond, 2, {9})).ok());
  EXPECT_EQ(s.clock_ms, 61 * kSecond);
  EXPECT_EQ(Rows(*s.table(1)).at(1).first, 61 * kSecond);
  ASSERT_TRUE(s.ApplyPush(At(3 * kSecond, 1, {1})).ok());
  EXPECT_EQ(Rows(*s.table(1)).at(1).first, 61 * kSecond) << "stamped with the clock";
}

// A push the table refuses is not replicated: it must not move the clock or expire anything.
TEST(Expiry, ARefusedPushExpiresNothing) {
  ShardState s;
  TableConfig c = Embedding(1, 10);
  c.optimizer.learning_rate = 1e30f;
  ASSERT_TRUE(s.CreateTable(c).ok());
  ASSERT_TRUE(s.ApplyPush(At(1 * kSecond, 1, {1}, 1e-30f)).ok());
  const auto before = Rows(*s.table(1));
  EXPECT_FALSE(s.ApplyPush(At(99 * kSecond, 1, {2}, 1e30f)).ok());
  EXPECT_EQ(Rows(*s.table(1)), before);
  EXPECT_EQ(s.clock_ms, 1 * kSecond);
  EXPECT_EQ(s.table(1)->expired(), 0u);
}

// A copy taken mid-stream (snapshot) continues exactly as the original: same rows, stamps,
// expiries and clock. Its control: the same rows with stamps of the loading replica's own
// clock (what a replica-local clock would give) expire differently.
TEST(Expiry, ASnapshotCarriesStampsAndClock) {
  ShardState original;
  ASSERT_TRUE(original.CreateTable(Embedding(1, 10)).ok());
  uint64_t now = 1000 * kSecond;
  auto step = [&](ShardState& s, uint64_t i) {
    return s.ApplyPush(At(now + i * 700, 1, {i % 37, (i * 5) % 53}));
  };
  for (uint64_t i = 0; i < 40; ++i) ASSERT_TRUE(step(original, i).ok());
  Result<std::vector<std::byte>> bytes = original.Encode();
  ASSERT_TRUE(bytes.ok());
  Result<std::unique_ptr<ShardState>> copy = ShardState::Decode(*bytes);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ((*copy)->clock_ms, original.clock_ms);
  EXPECT_EQ(Rows(*(*copy)->table(1)), Rows(*original.table(1)));
  // The control: the rows restamped at load, as by a local clock a little ahead.
  ShardState local;
  ASSERT_TRUE(local.CreateTable(Embedding(1, 10)).ok());
  original.table(1)->ForEachRowPushedAt([&](uint64_t key, uint64_t, std::span<const float> st) {
    ASSERT_TRUE(local.table(1)->InsertRow(key, st, original.clock_ms).ok());
  });
  for (uint64_t i = 40; i < 55; ++i) {  // 10.5 s: the older rows expire
    ASSERT_TRUE(step(original, i).ok());
    ASSERT_TRUE(step(**copy, i).ok());
    ASSERT_TRUE(step(local, i).ok());
  }
  EXPECT_GT(original.table(1)->expired(), 5u);
  EXPECT_EQ(Rows(*(*copy)->table(1)), Rows(*original.table(1)));
  EXPECT_EQ((*copy)->table(1)->expired(), original.table(1)->expired());
  EXPECT_EQ((*copy)->table(1)->Digest(), original.table(1)->Digest());
  EXPECT_NE(local.table(1)->Digest(), original.table(1)->Digest());
}

TEST(Expiry, ABoundedTableWithATtlDoesBoth) {
  ShardState s;
  TableConfig c = Embedding(1, 10);
  c.max_rows = 2;
  ASSERT_TRUE(s.CreateTable(c).ok());
  ASSERT_TRUE(s.ApplyPush(At(1 * kSecond, 1, {1, 2, 3})).ok());
  EXPECT_EQ(s.table(1)->evicted(), 1u);
  ASSERT_TRUE(s.ApplyPush(At(12 * kSecond, 1, {4})).ok());
  EXPECT_EQ(s.table(1)->expired(), 2u);
  EXPECT_EQ(s.table(1)->row_count(), 1u);
}

TEST(Admission, AnIdGetsARowAtItsNthPushAndEarlierOnesAreDropped) {
  ShardState s;
  ASSERT_TRUE(s.CreateTable(Embedding(1, 0, 3)).ok());
  ASSERT_TRUE(s.ApplyPush(At(0, 1, {5})).ok());
  ASSERT_TRUE(s.ApplyPush(At(0, 1, {5, 6})).ok());
  EXPECT_EQ(s.table(1)->row_count(), 0u);
  EXPECT_EQ(Weight(s, 1, 5), 0.5f) << "counted, not applied";
  ASSERT_TRUE(s.ApplyPush(At(0, 1, {5})).ok());
  EXPECT_EQ(Weight(s, 1, 5), 0.25f) << "the third push is applied, once";
  ASSERT_TRUE(s.ApplyPush(At(0, 1, {5})).ok());
  EXPECT_EQ(Weight(s, 1, 5), 0.0f) << "admitted: every push counts from now on";
  EXPECT_EQ(s.admission(1)->admitted(), 1u);
  EXPECT_EQ(s.admission(1)->rejected(), 3u);
}

TEST(Admission, OccurrencesWithinOnePushCountInOrder) {
  ShardState s;
  ASSERT_TRUE(s.CreateTable(Embedding(1, 0, 2)).ok());
  ASSERT_TRUE(s.ApplyPush(At(0, 1, {8, 9, 8, 8})).ok());
  EXPECT_EQ(Weight(s, 1, 8), 0.0f) << "the first occurrence dropped, the other two applied";
  EXPECT_EQ(Weight(s, 1, 9), 0.5f);
  EXPECT_EQ(s.admission(1)->rejected(), 2u);
}

TEST(Admission, ARefusedPushIsNotCounted) {
  ShardState s;
  TableConfig c = Embedding(1, 0, 2);
  c.optimizer.learning_rate = 1e30f;
  ASSERT_TRUE(s.CreateTable(c).ok());
  ASSERT_TRUE(s.ApplyPush(At(0, 1, {4, 4})).ok());  // admitted at its second occurrence
  EXPECT_FALSE(s.ApplyPush(At(0, 1, {4, 5}, 1e30f)).ok());
  EXPECT_EQ(s.admission(1)->Estimate(5), 0u);
  EXPECT_EQ(s.admission(1)->rejected(), 1u);
}

// The sketch's memory is fixed: a million distinct ids leave it the same size, and halving keeps
// old counts from admitting ids pushed once long ago.
TEST(Admission, CountsAreBoundedAndFade) {
  auto counts = PushAdmission::Create(2, 1u << 10);
  ASSERT_TRUE(counts.ok());
  auto table = Table::Create(Embedding(1, 0));
  ASSERT_TRUE(table.ok());
  const size_t size = (*counts)->counters().size();
  std::vector<float> g(2, 1.0f);
  auto push = [&](uint64_t key) {
    PushAdmission::Decision d = (*counts)->Decide(**table, std::vector<uint64_t>{key}, g);
    (*counts)->Commit(d);
    return d.admitted == 1;
  };
  EXPECT_FALSE(push(42));
  EXPECT_TRUE(push(42));
  uint64_t admitted_once = 0;
  for (uint64_t key = 1000; key < 1000 + 100000; ++key) admitted_once += push(key);
  EXPECT_EQ((*counts)->counters().size(), size);
  EXPECT_LT(admitted_once, 100000u / 4) << "collisions admit some ids early, not most";
  EXPECT_EQ((*counts)->Estimate(42), 0u) << "halved away";
  EXPECT_FALSE(push(7));
  EXPECT_TRUE(push(7)) << "recent counts still admit";
}

// A copy taken mid-stream admits exactly what the original admits. The control: the same
// rows with counts not carried (a new sketch) admit later, and the tables differ.
TEST(Admission, ASnapshotCarriesTheCounts) {
  ShardState original;
  ASSERT_TRUE(original.CreateTable(Embedding(1, 0, 3)).ok());
  auto step = [&](ShardState& s, uint64_t i) {
    return s.ApplyPush(At(0, 1, {i % 23, (i * 7) % 31, i % 5}));
  };
  for (uint64_t i = 0; i < 30; ++i) ASSERT_TRUE(step(original, i).ok());
  Result<std::vector<std::byte>> bytes = original.Encode();
  ASSERT_TRUE(bytes.ok());
  Result<std::unique_ptr<ShardState>> copy = ShardState::Decode(*bytes);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  ShardState forgetful;
  ASSERT_TRUE(forgetful.CreateTable(Embedding(1, 0, 3)).ok());
  original.table(1)->ForEachRow([&](uint64_t key, std::span<const float> st) {
    ASSERT_TRUE(forgetful.table(1)->InsertRow(key, st).ok());
  });
  for (uint64_t i = 30; i < 60; ++i) {
    ASSERT_TRUE(step(original, i).ok());
    ASSERT_TRUE(step(**copy, i).ok());
    ASSERT_TRUE(step(forgetful, i).ok());
  }
  EXPECT_EQ(Rows(*(*copy)->table(1)), Rows(*original.table(1)));
  EXPECT_EQ((*copy)->admission(1)->admitted(), original.admission(1)->admitted());
  EXPECT_EQ((*copy)->admission(1)->rejected(), original.admission(1)->rejected());
  EXPECT_NE(Rows(*forgetful.table(1)), Rows(*original.table(1)));
}

TEST(ExpiryAndAdmission, BadConfigsAreRefusedNamingTheField) {
  auto parse = [](const std::string& table) {
    return ParseClusterSpec(R"({"version": 1, "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}],
                               "tables": [)" +
                            table + "]}");
  };
  EXPECT_TRUE(parse(R"({"id": 1, "dim": 4, "ttl_seconds": 60, "admit_after_pushes": 3})").ok());
  auto dense = parse(R"({"id": 1, "dim": 4, "kind": "dense", "rows": 4, "ttl_seconds": 60})");
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.status().message().find("tables[0].ttl_seconds"), std::string::npos)
      << dense.status().ToString();
  auto many = parse(R"({"id": 1, "dim": 4, "admit_after_pushes": 100000})");
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("admit_after_pushes"), std::string::npos);
  EXPECT_FALSE(parse(R"({"id": 1, "dim": 4, "ttl_seconds": -5})").ok());
  EXPECT_FALSE(parse(R"({"id": 1, "dim": 4, "ttl_seconds": 1e12})").ok());
  auto round = parse(R"({"id": 1, "dim": 4, "ttl_seconds": 60, "admit_after_pushes": 3})");
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->tables[0].ttl_seconds, 60u);
  EXPECT_EQ(round->tables[0].admit_after_pushes, 3u);
  Result<ClusterSpec> again = ParseClusterSpec(ClusterSpecToJson(*round));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tables[0].ttl_seconds, 60u) << "written back";
  EXPECT_EQ(again->tables[0].admit_after_pushes, 3u);
}

}  // namespace expiry_admission_test
}  // namespace bx::ps
