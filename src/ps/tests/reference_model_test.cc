// The table against a naive reference of the optimisers: a random sequence of pushes (SGD and
// Adagrad tables, repeated keys, new and old keys), then every key fetched. Same operations in
// the same order must give bit-identical floats.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "ps/shard_state.h"
#include "ps/workload.h"

namespace bx::ps {
namespace {

// Written from the textbook formulas, independently of src/ps/optimizer.cc. Rows start from
// the table's constant initialiser, which is enough here: random initialisers are tested in
// table_test.
struct ReferenceTable {
  TableConfig config;
  std::map<uint64_t, std::vector<float>> weights, accumulators;

  std::vector<float> Row(uint64_t key) const {
    auto it = weights.find(key);
    return it != weights.end() ? it->second : std::vector<float>(config.dim, config.init.value);
  }
  void Push(uint64_t key, const float* g) {
    std::vector<float>& w = weights.try_emplace(key, config.dim, config.init.value).first->second;
    std::vector<float>& a =
        accumulators.try_emplace(key, config.dim, config.optimizer.initial_accumulator)
            .first->second;
    for (uint32_t j = 0; j < config.dim; ++j) {
      if (config.optimizer.kind == OptimizerKind::kSgd) {
        w[j] = w[j] - config.optimizer.learning_rate * g[j];
      } else {
        a[j] = a[j] + g[j] * g[j];
        float step = config.optimizer.learning_rate * g[j];
        w[j] = w[j] - step / (std::sqrt(a[j]) + config.optimizer.epsilon);
      }
    }
  }
};

TEST(ReferenceModel, RandomPushesMatchTheReferenceExactly) {
  ShardState state;
  std::map<uint32_t, ReferenceTable> reference;
  for (uint32_t id : {1u, 2u}) {
    TableConfig c;
    c.id = id;
    c.dim = id == 1 ? 4 : 9;
    c.init.kind = InitializerKind::kConstant;
    c.init.value = 0.125f * id;
    c.optimizer.kind = id == 1 ? OptimizerKind::kSgd : OptimizerKind::kAdagrad;
    c.optimizer.learning_rate = id == 1 ? 0.05f : 0.3f;
    c.optimizer.initial_accumulator = 0.1f;
    ASSERT_TRUE(state.CreateTable(c).ok());
    reference[id] = ReferenceTable{c, {}, {}};
  }

  Rng rng(20240607);
  ZipfKeys hot(500, 1.1);  // repeated keys are the interesting case
  for (int step = 0; step < 2000; ++step) {
    PushRequest push;
    push.table_id = rng.Below(2) + 1;
    push.dim = reference[push.table_id].config.dim;
    push.id = PushId{1, static_cast<uint64_t>(step + 1)};
    const uint64_t n = 1 + rng.Below(40);
    for (uint64_t i = 0; i < n; ++i) {
      push.keys.push_back(hot.Next(rng));
      for (uint32_t j = 0; j < push.dim; ++j) {
        push.gradients.push_back(static_cast<float>(rng.Normal()));
      }
    }
    ASSERT_TRUE(state.ApplyPush(push).ok());
    for (uint64_t i = 0; i < n; ++i) {
      reference[push.table_id].Push(push.keys[i], push.gradients.data() + i * push.dim);
    }
  }

  for (auto& [id, ref] : reference) {
    std::vector<uint64_t> keys;
    for (auto& [key, w] : ref.weights) keys.push_back(key);
    keys.push_back(0xdeadbeef);  // never pushed: the initial value
    std::vector<float> got(keys.size() * ref.config.dim);
    ASSERT_TRUE(state.table(id)->Fetch(keys, std::span<float>(got)).ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      std::vector<float> want = ref.Row(keys[i]);
      for (uint32_t j = 0; j < ref.config.dim; ++j) {
        ASSERT_EQ(got[i * ref.config.dim + j], want[j]) << "table " << id << " key " << keys[i];
      }
    }
    EXPECT_EQ(state.table(id)->row_count(), ref.weights.size());
  }
}

}  // namespace
}  // namespace bx::ps
