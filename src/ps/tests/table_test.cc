// Tables: initialisers, fetch without storing, dense key ranges, concurrent pushes.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "ps/table.h"

namespace bx::ps {
namespace {

TableConfig Config(InitializerKind init, OptimizerKind optimizer, uint32_t dim = 8) {
  TableConfig c;
  c.id = 1;
  c.dim = dim;
  c.init.kind = init;
  c.init.seed = 1234;
  c.init.value = 0.5f;
  c.optimizer.kind = optimizer;
  c.optimizer.learning_rate = 0.25f;
  return c;
}

std::unique_ptr<Table> Make(const TableConfig& c) {
  auto t = Table::Create(c);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(Table, RandomInitialisersAreDeterministicPerKeyAcrossTables) {
  for (InitializerKind kind : {InitializerKind::kUniform, InitializerKind::kNormal}) {
    auto a = Make(Config(kind, OptimizerKind::kSgd));
    auto b = Make(Config(kind, OptimizerKind::kSgd));
    std::vector<uint64_t> keys = {3, 1, 99, 1ull << 63};
    std::vector<float> va(keys.size() * 8), vb(keys.size() * 8);
    ASSERT_TRUE(a->Fetch(keys, std::span<float>(va)).ok());
    // b fetches in another order: values depend only on the key.
    std::vector<uint64_t> reversed(keys.rbegin(), keys.rend());
    ASSERT_TRUE(b->Fetch(reversed, std::span<float>(vb)).ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      for (size_t j = 0; j < 8; ++j) {
        EXPECT_EQ(va[i * 8 + j], vb[(keys.size() - 1 - i) * 8 + j]);
      }
    }
    EXPECT_NE(va[0], va[8]);  // different keys, different rows
    EXPECT_NE(va[0], va[1]);  // different elements
    EXPECT_EQ(a->row_count(), 0u) << "fetching must not store rows";
  }
}

TEST(Table, InitialiserDistributions) {
  auto uniform = Make(Config(InitializerKind::kUniform, OptimizerKind::kSgd, 1000));
  auto normal = Make(Config(InitializerKind::kNormal, OptimizerKind::kSgd, 1000));
  std::vector<float> u(1000), n(1000);
  ASSERT_TRUE(uniform->Fetch(std::vector<uint64_t>{5}, std::span<float>(u)).ok());
  ASSERT_TRUE(normal->Fetch(std::vector<uint64_t>{5}, std::span<float>(n)).ok());
  double usum = 0, nsum = 0, nsq = 0;
  for (float v : u) {
    EXPECT_GE(v, -0.01f);
    EXPECT_LT(v, 0.01f);
    usum += v;
  }
  for (float v : n) nsum += v, nsq += double{v} * v;
  EXPECT_NEAR(usum / 1000, 0.0, 0.001);
  EXPECT_NEAR(nsum / 1000, 0.0, 0.001);
  EXPECT_NEAR(std::sqrt(nsq / 1000), 0.01, 0.001);

  auto constant = Make(Config(InitializerKind::kConstant, OptimizerKind::kSgd, 3));
  std::vector<float> c(3);
  ASSERT_TRUE(constant->Fetch(std::vector<uint64_t>{77}, std::span<float>(c)).ok());
  EXPECT_EQ(c, (std::vector<float>{0.5f, 0.5f, 0.5f}));
}

TEST(Table, PushCreatesRowFromInitialiserThenApplies) {
  auto t = Make(Config(InitializerKind::kConstant, OptimizerKind::kSgd, 2));
  std::vector<uint64_t> keys = {10, 10};
  std::vector<float> grads = {1, 2, 1, 2};  // key 10 twice: applied in order
  ASSERT_TRUE(t->Push(keys, grads).ok());
  std::vector<float> v(2);
  ASSERT_TRUE(t->Fetch(std::vector<uint64_t>{10}, std::span<float>(v)).ok());
  EXPECT_EQ(v, (std::vector<float>{0.5f - 0.25f - 0.25f, 0.5f - 0.5f - 0.5f}));
  EXPECT_EQ(t->row_count(), 1u);
}

TEST(Table, RejectsBadShapesAndDenseKeysWithoutApplyingAnything) {
  TableConfig c = Config(InitializerKind::kZeros, OptimizerKind::kSgd, 2);
  c.kind = TableKind::kDense;
  c.dense_rows = 4;
  auto t = Make(c);
  std::vector<float> grads = {1, 1, 1, 1};
  EXPECT_EQ(t->Push(std::vector<uint64_t>{0, 4}, grads).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->row_count(), 0u);
  EXPECT_EQ(t->Push(std::vector<uint64_t>{0}, grads).code(), StatusCode::kInvalidArgument);
  std::vector<float> out(2);
  EXPECT_FALSE(t->Fetch(std::vector<uint64_t>{9}, std::span<float>(out)).ok());
  EXPECT_FALSE(t->Fetch(std::vector<uint64_t>{0, 1}, std::span<float>(out)).ok());
  EXPECT_TRUE(t->Push(std::vector<uint64_t>{0, 3}, grads).ok());

  TableConfig bad = Config(InitializerKind::kUniform, OptimizerKind::kSgd, 2);
  bad.init.low = bad.init.high = 1;
  EXPECT_FALSE(Table::Create(bad).ok());
  bad = Config(InitializerKind::kZeros, OptimizerKind::kAdagrad, 0);
  EXPECT_FALSE(Table::Create(bad).ok());
}

// A push whose update would leave a row non-finite (SGD with a huge learning rate: 1e30 x 1e10
// overflows float) is refused whole: the key before it in the same push is not changed either.
// A key that repeats in one push gets both of its gradients, in order.
TEST(Table, APushThatWouldOverflowARowChangesNothing) {
  TableConfig config = Config(InitializerKind::kZeros, OptimizerKind::kSgd, 2);
  config.optimizer.learning_rate = 1e30f;
  auto t = Make(config);
  const std::vector<uint64_t> keys = {1, 2};
  const std::vector<float> grads = {1e-30f, 1e-30f, 1e10f, 0.0f};
  Status s = t->Push(keys, grads);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("key 2"), std::string::npos) << s.ToString();
  EXPECT_EQ(t->row_count(), 0u);
  // The same when only a repeated key's second update overflows (its first alone would not).
  const std::vector<uint64_t> repeated = {1, 3, 3};
  const std::vector<float> steps = {1e-30f, 0, 1e-30f, 0, 1e9f, 0};
  s = t->Push(repeated, steps);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("key 3"), std::string::npos) << s.ToString();
  EXPECT_EQ(t->row_count(), 0u);

  config.optimizer.learning_rate = 0.25f;
  auto u = Make(config);
  ASSERT_TRUE(u->Push(std::vector<uint64_t>{5, 5}, std::vector<float>{1, 1, 1, 1}).ok());
  std::vector<float> v(2);
  ASSERT_TRUE(u->Fetch(std::vector<uint64_t>{5}, std::span<float>(v)).ok());
  EXPECT_EQ(v[0], -0.5f);
  // Repeated and single keys in one push, new and stored rows: each key gets all its gradients.
  ASSERT_TRUE(u->Push(std::vector<uint64_t>{6, 5, 6, 7, 6}, std::vector<float>(10, 1)).ok());
  std::vector<float> rows(6);
  ASSERT_TRUE(u->Fetch(std::vector<uint64_t>{5, 6, 7}, std::span<float>(rows)).ok());
  EXPECT_EQ(rows, (std::vector<float>{-0.75f, -0.75f, -0.75f, -0.75f, -0.25f, -0.25f}));
}

// Eight threads push +1 gradients to 64 shared keys while others fetch. With lr = 0.25 and
// small integer counts, every intermediate value is exact in float, so the final value shows
// whether any update was lost or doubled, and no fetch may see a torn row (elements differ).
TEST(Table, ConcurrentPushesAreAtomicPerKey) {
  auto t = Make(Config(InitializerKind::kZeros, OptimizerKind::kSgd, 16));
  constexpr int kThreads = 8, kRounds = 400, kKeys = 64;
  std::vector<uint64_t> keys(kKeys);
  for (int k = 0; k < kKeys; ++k) keys[k] = k * 1000003ull;
  const std::vector<float> grads(kKeys * 16, 1.0f);
  std::atomic<bool> torn{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) ASSERT_TRUE(t->Push(keys, grads).ok());
    });
  }
  threads.emplace_back([&] {
    std::vector<float> v(kKeys * 16);
    for (int r = 0; r < 200; ++r) {
      ASSERT_TRUE(t->Fetch(keys, std::span<float>(v)).ok());
      for (int k = 0; k < kKeys; ++k) {
        for (int j = 1; j < 16; ++j) torn = torn || v[k * 16 + j] != v[k * 16];
      }
    }
  });
  for (auto& th : threads) th.join();
  EXPECT_FALSE(torn);
  std::vector<float> v(kKeys * 16);
  ASSERT_TRUE(t->Fetch(keys, std::span<float>(v)).ok());
  for (float x : v) EXPECT_EQ(x, -0.25f * kThreads * kRounds);
}

}  // namespace
}  // namespace bx::ps
