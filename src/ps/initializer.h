// Deterministic row initialisers: element j of key k's row is a pure function of
// (config, k, j), so replicas and restarted servers agree without communicating, and a row
// that was never pushed can be read without being stored. Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <span>

#include "bx/ps/table_config.h"

namespace bx::ps {

// Writes the initial values of `key`'s row into `row` (row.size() == the table's dim).
void InitializeRow(const InitializerConfig& config, uint64_t key, std::span<float> row);

}  // namespace bx::ps
