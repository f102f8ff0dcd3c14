#include "ps/optimizer.h"

#include <cmath>

namespace bx::ps {

void InitializeOptimizerState(const OptimizerConfig& config, uint32_t dim, std::span<float> row) {
  if (config.kind != OptimizerKind::kAdagrad) return;
  for (uint32_t j = 0; j < dim; ++j) row[dim + j] = config.initial_accumulator;
}

void ApplyGradient(const OptimizerConfig& config, uint32_t dim, std::span<float> row,
                   std::span<const float> gradient) {
  float* w = row.data();
  const float* g = gradient.data();
  const float lr = config.learning_rate;
  switch (config.kind) {
    case OptimizerKind::kSgd:
      for (uint32_t j = 0; j < dim; ++j) w[j] -= lr * g[j];
      return;
    case OptimizerKind::kAdagrad: {
      float* a = row.data() + dim;
      for (uint32_t j = 0; j < dim; ++j) {
        a[j] += g[j] * g[j];
        w[j] -= lr * g[j] / (std::sqrt(a[j]) + config.epsilon);
      }
      return;
    }
  }
}

}  // namespace bx::ps
