// Optimisers applied to one row. A row's state is `dim` weights followed, for Adagrad, by `dim`
// accumulators (RowStride). The caller holds the row's lock: these functions are the unit that
// "atomic per key" refers to. Thread-compatible (pure functions on caller-owned memory).
#pragma once

#include <cstdint>
#include <span>

#include "bx/ps/table_config.h"

namespace bx::ps {

// Floats stored per row: weights, plus accumulators for Adagrad.
inline uint32_t RowStride(const TableConfig& config) {
  return config.optimizer.kind == OptimizerKind::kAdagrad ? 2 * config.dim : config.dim;
}

// Sets the optimiser state of a new row whose weights are already initialised.
void InitializeOptimizerState(const OptimizerConfig& config, uint32_t dim, std::span<float> row);

// Applies one gradient (dim floats) to one row (RowStride floats).
void ApplyGradient(const OptimizerConfig& config, uint32_t dim, std::span<float> row,
                   std::span<const float> gradient);

}  // namespace bx::ps
