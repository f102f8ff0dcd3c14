// Snapshot files: round trip of tables, optimiser state, dedup record and position; corrupt,
// truncated and foreign files are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "ps/shard_replica.h"

namespace bx::ps {
namespace {

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void WriteFile(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
}

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TableConfig emb;
    emb.id = 1;
    emb.name = "user embeddings";
    emb.dim = 8;
    emb.init = InitializerConfig{InitializerKind::kUniform, 0, -0.5f, 0.5f, 0, 0, 77};
    emb.optimizer = OptimizerConfig{OptimizerKind::kAdagrad, 0.2f, 0.3f, 1e-6f};
    TableConfig dense;
    dense.id = 2;
    dense.kind = TableKind::kDense;
    dense.dim = 3;
    dense.dense_rows = 10;
    dense.optimizer.kind = OptimizerKind::kSgd;
    ASSERT_TRUE(primary_.CreateTable(emb).ok());
    ASSERT_TRUE(primary_.CreateTable(dense).ok());
    ASSERT_TRUE(primary_.BecomePrimary(3, {}).ok());
    for (uint64_t s = 1; s <= 50; ++s) {
      PushRequest p;
      p.id = PushId{s % 3 + 1, s / 3 + 1};
      p.table_id = s % 2 ? 1 : 2;
      p.dim = s % 2 ? 8 : 3;
      p.keys = {s % 10, (s * 7) % 10};
      p.gradients.assign(2 * p.dim, 0.01f * s);
      primary_.HandlePush(p, [](Result<PushAck> r) { ASSERT_TRUE(r.ok()); });
    }
  }

  std::vector<float> Values(const ShardState& s, uint32_t table) {
    const Table* t = s.table(table);
    std::vector<uint64_t> keys(10);
    for (uint64_t k = 0; k < 10; ++k) keys[k] = k;
    std::vector<float> v(10 * t->dim());
    EXPECT_TRUE(t->Fetch(keys, std::span<float>(v)).ok());
    return v;
  }

  ShardReplica primary_;
};

TEST_F(SnapshotTest, RoundTripRestoresEverything) {
  const std::string path = TempPath("bx_ps_snapshot_roundtrip");
  ASSERT_TRUE(primary_.Save(path).ok());
  Result<std::unique_ptr<ShardState>> loaded = ShardState::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const ShardState& s = **loaded;
  EXPECT_EQ(s.epoch, 3u);
  EXPECT_EQ(s.applied_lsn, 50u);
  EXPECT_EQ(s.table_ids(), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(s.table(1)->config().name, "user embeddings");
  EXPECT_EQ(s.table(1)->config().init.seed, 77u);
  EXPECT_EQ(s.table(1)->config().optimizer.epsilon, 1e-6f);
  EXPECT_EQ(s.table(2)->config().dense_rows, 10u);
  for (uint32_t t : {1u, 2u}) {
    EXPECT_EQ(Values(s, t), Values(primary_.state(), t));
    EXPECT_EQ(s.table(t)->row_count(), primary_.state().table(t)->row_count());
  }
  // The Adagrad accumulators came back too: the same next push gives the same result.
  std::vector<std::pair<uint64_t, std::vector<float>>> a, b;
  primary_.state().table(1)->ForEachRow([&](uint64_t k, std::span<const float> r) {
    a.emplace_back(k, std::vector<float>(r.begin(), r.end()));
  });
  s.table(1)->ForEachRow([&](uint64_t k, std::span<const float> r) {
    b.emplace_back(k, std::vector<float>(r.begin(), r.end()));
  });
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  EXPECT_EQ(s.dedup().Export().clients.size(), 3u);
  EXPECT_EQ(s.dedup().Check(PushId{2, 1}, 0), PushDedup::Verdict::kDuplicate);
  EXPECT_EQ(s.dedup().Check(PushId{1, 1}, 0), PushDedup::Verdict::kNew);  // client 1 starts at 2

  // A replica restarted from the snapshot still refuses to apply an old push twice.
  auto restarted =
      std::make_unique<ShardReplica>(std::move(loaded).value(), ShardReplica::Options{});
  EXPECT_EQ(restarted->position(), (ShardReplica::Position{3, 50}));
  ASSERT_TRUE(restarted->BecomePrimary(4, {}).ok());
  PushRequest old;
  old.id = PushId{2, 1};
  old.table_id = 1;
  old.dim = 8;
  old.keys = {1};
  old.gradients.assign(8, 5.0f);
  bool duplicate = false;
  restarted->HandlePush(old, [&](Result<PushAck> r) { duplicate = r.ok() && r->duplicate; });
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(Values(restarted->state(), 1), Values(primary_.state(), 1));
}

TEST_F(SnapshotTest, CorruptionIsDetected) {
  const std::string path = TempPath("bx_ps_snapshot_corrupt");
  ASSERT_TRUE(primary_.Save(path).ok());
  const std::vector<char> good = ReadFile(path);
  ASSERT_GT(good.size(), 100u);

  std::vector<char> flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  WriteFile(path, flipped);
  EXPECT_EQ(ShardState::Load(path).status().code(), StatusCode::kDataLoss);

  for (size_t cut : {size_t{0}, size_t{10}, size_t{32}, good.size() - 1}) {
    WriteFile(path, std::vector<char>(good.begin(), good.begin() + cut));
    EXPECT_EQ(ShardState::Load(path).status().code(), StatusCode::kDataLoss) << cut;
  }
  std::vector<char> version = good;
  version[8] = 9;
  WriteFile(path, version);
  EXPECT_NE(ShardState::Load(path).status().message().find("version"), std::string::npos);
  std::vector<char> magic = good;
  magic[0] = 'X';
  WriteFile(path, magic);
  EXPECT_EQ(ShardState::Load(path).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ShardState::Load(path + ".absent").status().code(), StatusCode::kNotFound);
}

// A primary copies its state while pushes wait and encodes the copy after they resume: the copy
// holds the same rows, optimiser state, dedup record and position, and later pushes to the
// original do not reach it.
TEST_F(SnapshotTest, ACopyIsTheStateAtTheTimeOfCopying) {
  Result<std::unique_ptr<ShardState>> copy = primary_.state().Copy();
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  for (uint32_t t : {1u, 2u}) EXPECT_EQ(Values(**copy, t), Values(primary_.state(), t));
  EXPECT_EQ((*copy)->applied_lsn, primary_.state().applied_lsn);
  EXPECT_EQ((*copy)->dedup().Export().clients.size(), 3u);
  const std::vector<float> before = Values(**copy, 1);
  PushRequest p;
  p.id = PushId{9, 1};
  p.table_id = 1;
  p.dim = 8;
  p.keys = {1, 2, 3};
  p.gradients.assign(24, 1.0f);
  primary_.HandlePush(p, [](Result<PushAck> r) { ASSERT_TRUE(r.ok()); });
  EXPECT_NE(Values(primary_.state(), 1), before);
  EXPECT_EQ(Values(**copy, 1), before);
  EXPECT_FALSE((*copy)->dedup().Knows(9));
  Result<std::vector<std::byte>> bytes = (*copy)->Encode();
  ASSERT_TRUE(bytes.ok());
  Result<std::unique_ptr<ShardState>> decoded = ShardState::Decode(*bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(Values(**decoded, 1), before);
}

// A joiner of an older build reads snapshots up to version 2 (ps.Join): a primary writes it
// one at that version, which a version 2 reader (the layout frozen here: no bounds after the
// optimiser) and this build both load to the same rows; a bounded table, which version 2
// cannot carry, is refused naming it, before anything is copied.
TEST_F(SnapshotTest, AnOlderJoinerGetsASnapshotOfTheVersionItReads) {
  Result<std::vector<std::byte>> v2 = primary_.state().Encode(2);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  uint32_t header_version = 0;
  std::memcpy(&header_version, v2->data() + 8, 4);
  EXPECT_EQ(header_version, 2u);
  // Version 2's first table config: u32 id .. u64 seed and three floats, then the name, with
  // no max_rows, max_bytes or evicted between (body: u64 epoch, u64 lsn, u32 n, u32 0).
  const size_t config = 32 + 24;
  const size_t name_offset = config + 4 + 4 + 4 + 4 + 8 + 5 * 4 + 8 + 3 * 4;
  uint32_t name_size = 0;
  std::memcpy(&name_size, v2->data() + config + 12, 4);
  ASSERT_EQ(name_size, std::string("user embeddings").size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(v2->data() + name_offset), name_size),
            "user embeddings");
  Result<std::unique_ptr<ShardState>> decoded = ShardState::Decode(*v2);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  for (uint32_t t : {1u, 2u}) EXPECT_EQ(Values(**decoded, t), Values(primary_.state(), t));
  EXPECT_EQ((*decoded)->dedup().Export().clients.size(), 3u);

  EXPECT_EQ(primary_.state().Encode(1).status().code(), StatusCode::kFailedPrecondition);
  ShardReplica bounded;
  TableConfig capped;
  capped.id = 7;
  capped.name = "capped";
  capped.dim = 4;
  capped.max_rows = 100;
  ASSERT_TRUE(bounded.CreateTable(capped).ok());
  ASSERT_TRUE(bounded.BecomePrimary(1, {}).ok());
  Result<ShardReplica::JoinSnapshot> refused = bounded.SnapshotForJoin(1, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("capped"), std::string::npos)
      << refused.status().ToString();
  EXPECT_TRUE(bounded.SnapshotForJoin(1, 3).ok());

  ShardReplica expiring;  // version 3 cannot carry a ttl's stamps and clock
  TableConfig stamped = capped;
  stamped.max_rows = 0;
  stamped.ttl_seconds = 60;
  ASSERT_TRUE(expiring.CreateTable(stamped).ok());
  ASSERT_TRUE(expiring.BecomePrimary(1, {}).ok());
  refused = expiring.SnapshotForJoin(1, 3);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("ttl"), std::string::npos)
      << refused.status().ToString();
  EXPECT_TRUE(expiring.SnapshotForJoin(1, 4).ok());
}

// Version 1 files (before client keys and the minimum generation) still load: their clients
// get key 0, so a client's next push under its own key starts a new session.
TEST_F(SnapshotTest, AVersionOneFileLoads) {
  ShardReplica fresh;
  TableConfig dense;
  dense.id = 2;
  dense.kind = TableKind::kDense;
  dense.dim = 3;
  dense.dense_rows = 10;
  dense.optimizer.kind = OptimizerKind::kSgd;
  ASSERT_TRUE(fresh.CreateTable(dense).ok());
  const std::string path = TempPath("bx_ps_snapshot_v1");
  ASSERT_TRUE(fresh.Save(path).ok());  // no pushes: the dedup section is 16 bytes of zeros
  std::vector<char> file = ReadFile(path);
  // v1's dedup section: u64 clients 1, client 5: u64 id, u64 contiguous 3, u64 n 0.
  std::vector<char> body(file.begin() + 32, file.end() - 16);
  // v1 (and v2) table configs end at epsilon: no max rows, max bytes, rows evicted, nor
  // version 4's ttl, admission and rows expired (body bytes 96..144, after the position, the
  // table count, the push clock and the config's first 64 bytes); and no push clock (24..32).
  body.erase(body.begin() + 96, body.begin() + 144);
  body.erase(body.begin() + 24, body.begin() + 32);
  for (uint64_t v : {uint64_t{1}, uint64_t{5}, uint64_t{3}, uint64_t{0}}) {
    const char* b = reinterpret_cast<const char*>(&v);  // little-endian hosts, as the format
    body.insert(body.end(), b, b + 8);
  }
  uint64_t sum = 0xcbf29ce484222325ull;  // FNV-1a-64, as the header's checksum
  for (char c : body) sum = (sum ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  const uint32_t version = 1;
  const uint64_t size = body.size();
  std::memcpy(file.data() + 8, &version, 4);
  std::memcpy(file.data() + 16, &size, 8);
  std::memcpy(file.data() + 24, &sum, 8);
  file.resize(32);
  file.insert(file.end(), body.begin(), body.end());
  WriteFile(path, file);
  Result<std::unique_ptr<ShardState>> loaded = ShardState::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const PushDedup& dedup = (*loaded)->dedup();
  EXPECT_EQ(dedup.client_count(), 1u);
  EXPECT_EQ(dedup.Check(PushId{5, 3}, 0), PushDedup::Verdict::kDuplicate);
  EXPECT_EQ(dedup.Check(PushId{5, 4}, 0x77), PushDedup::Verdict::kWrongKey);
}

}  // namespace
}  // namespace bx::ps
