#include "ps/table.h"

#include <array>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "bx/ps/cluster.h"  // Mix64
#include "ps/initializer.h"
#include "ps/optimizer.h"

namespace bx::ps {

Status Table::ValidateConfig(const TableConfig& c) {
  const std::string name = "table " + std::to_string(c.id);
  if (c.dim == 0 || c.dim > kMaxDim) return InvalidArgument(name + ": dim out of range");
  if (c.kind != TableKind::kEmbedding && c.kind != TableKind::kDense) {
    return InvalidArgument(name + ": unknown kind");
  }
  if (c.kind == TableKind::kDense && (c.dense_rows == 0 || c.dense_rows > kMaxDenseRows)) {
    return InvalidArgument(name + ": dense table needs 1.." + std::to_string(kMaxDenseRows) +
                           " rows");
  }
  switch (c.init.kind) {
    case InitializerKind::kZeros:
    case InitializerKind::kConstant:
      break;
    case InitializerKind::kUniform:
      if (!(c.init.low < c.init.high) || !std::isfinite(c.init.low) ||
          !std::isfinite(c.init.high)) {
        return InvalidArgument(name + ": uniform initialiser needs finite low < high");
      }
      break;
    case InitializerKind::kNormal:
      if (!(c.init.stddev >= 0) || !std::isfinite(c.init.mean)) {
        return InvalidArgument(name + ": normal initialiser needs stddev >= 0");
      }
      break;
    default:
      return InvalidArgument(name + ": unknown initialiser");
  }
  const OptimizerConfig& o = c.optimizer;
  if (o.kind != OptimizerKind::kSgd && o.kind != OptimizerKind::kAdagrad) {
    return InvalidArgument(name + ": unknown optimiser");
  }
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate)) {
    return InvalidArgument(name + ": learning rate must be > 0");
  }
  if (o.kind == OptimizerKind::kAdagrad && (!(o.initial_accumulator >= 0) || !(o.epsilon > 0))) {
    return InvalidArgument(name + ": Adagrad needs initial_accumulator >= 0 and epsilon > 0");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Table>> Table::Create(const TableConfig& config) {
  BX_RETURN_IF_ERROR(ValidateConfig(config));
  return std::unique_ptr<Table>(new Table(config));
}

Table::Table(const TableConfig& config) : config_(config), stride_(RowStride(config)) {}

// The stripe uses the low bits of the mixed key; the shard router uses the high bits
// (multiply-shift), so keys of one shard still spread over all stripes.
size_t Table::StripeIndex(uint64_t key) {
  return Mix64(key) % kStripes;
}
Table::Stripe& Table::StripeOf(uint64_t key) {
  return stripes_[StripeIndex(key)];
}
const Table::Stripe& Table::StripeOf(uint64_t key) const {
  return stripes_[StripeIndex(key)];
}

Status Table::ValidateKeys(std::span<const uint64_t> keys) const {
  if (config_.kind != TableKind::kDense) return Status::Ok();
  for (uint64_t key : keys) {
    if (key >= config_.dense_rows) {
      return InvalidArgument("table " + std::to_string(config_.id) + ": key " +
                             std::to_string(key) + " outside dense rows 0.." +
                             std::to_string(config_.dense_rows - 1));
    }
  }
  return Status::Ok();
}

Status Table::Fetch(std::span<const uint64_t> keys, std::span<std::byte> out) const {
  const size_t row_bytes = size_t{config_.dim} * sizeof(float);
  if (out.size() != keys.size() * row_bytes) {
    return InvalidArgument("fetch: output holds " + std::to_string(out.size()) + " bytes, need " +
                           std::to_string(keys.size() * row_bytes));
  }
  BX_RETURN_IF_ERROR(ValidateKeys(keys));
  std::vector<float> scratch;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::byte* dst = out.data() + i * row_bytes;
    const Stripe& stripe = StripeOf(keys[i]);
    {
      std::shared_lock lock(stripe.mu);
      auto it = stripe.index.find(keys[i]);
      if (it != stripe.index.end()) {
        std::memcpy(dst, stripe.rows.data() + it->second * stride_, row_bytes);
        continue;
      }
    }
    scratch.resize(config_.dim);
    InitializeRow(config_.init, keys[i], scratch);
    std::memcpy(dst, scratch.data(), row_bytes);
  }
  return Status::Ok();
}

Status Table::Fetch(std::span<const uint64_t> keys, std::span<float> out) const {
  return Fetch(keys, std::as_writable_bytes(out));
}

Status Table::Push(std::span<const uint64_t> keys, std::span<const float> gradients) {
  const size_t dim = config_.dim;
  if (gradients.size() != keys.size() * dim) {
    return InvalidArgument("push to table " + std::to_string(config_.id) + ": " +
                           std::to_string(gradients.size()) + " gradients for " +
                           std::to_string(keys.size()) + " keys of dim " + std::to_string(dim));
  }
  BX_RETURN_IF_ERROR(ValidateKeys(keys));
  // A push whose step would leave a value or an accumulator non-finite (an SGD step with a large
  // learning rate overflows float) changes nothing and is refused whole, so every update is
  // computed and checked before any is stored. The stripes the push touches are held, in stripe
  // order, from the first read to the last write: concurrent pushes stay atomic with each other,
  // and a fetch sees each row whole.
  std::array<bool, kStripes> touched{};
  for (uint64_t key : keys) touched[StripeIndex(key)] = true;
  std::vector<std::unique_lock<std::shared_mutex>> locks;
  for (size_t i = 0; i < kStripes; ++i) {
    if (touched[i]) locks.emplace_back(stripes_[i].mu);
  }
  // Check pass. A key pushed once is updated in a scratch row and the result dropped; the store
  // pass computes it again, in place. A copy of every updated row (what this used to keep) is a
  // second table the size of the push: a 64 MiB push allocated and faulted in 64 MiB more on
  // every replica. A key pushed more than once keeps its running state aside, since each of its
  // updates starts from the one before.
  std::unordered_map<uint64_t, uint32_t> pushes;  // key -> times in this push
  pushes.reserve(keys.size());
  for (uint64_t key : keys) ++pushes[key];
  std::unordered_map<uint64_t, size_t> running_row;  // repeated key -> its row in `running`
  std::vector<float> running;
  std::vector<float> scratch(stride_);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::span<float> row(scratch);
    bool start = true;
    if (pushes[keys[i]] > 1) {
      auto [slot, first] = running_row.try_emplace(keys[i], running.size() / stride_);
      if (first) running.resize(running.size() + stride_);
      row = std::span<float>(running.data() + slot->second * stride_, stride_);
      start = first;
    }
    if (start) LoadRowLocked(keys[i], row);
    ApplyGradient(config_.optimizer, config_.dim, row, gradients.subspan(i * dim, dim));
    for (size_t j = 0; j < stride_; ++j) {
      if (!std::isfinite(row[j])) {
        return InvalidArgument("push to table " + std::to_string(config_.id) + ": key " +
                               std::to_string(keys[i]) + ": the update leaves element " +
                               std::to_string(j) + " of its row non-finite (learning rate " +
                               "times gradient overflows); nothing applied");
      }
    }
  }
  // Store pass: the same arithmetic on the same rows, now in place.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (pushes[keys[i]] > 1) continue;
    Stripe& stripe = StripeOf(keys[i]);  // held above
    auto [it, inserted] = stripe.index.try_emplace(keys[i], stripe.rows.size() / stride_);
    if (inserted) stripe.rows.resize(stripe.rows.size() + stride_);
    std::span<float> row(stripe.rows.data() + it->second * stride_, stride_);
    if (inserted) InitializeStoredRow(keys[i], row);
    ApplyGradient(config_.optimizer, config_.dim, row, gradients.subspan(i * dim, dim));
  }
  for (const auto& [key, index] : running_row) {
    Stripe& stripe = StripeOf(key);
    auto [it, inserted] = stripe.index.try_emplace(key, stripe.rows.size() / stride_);
    if (inserted) stripe.rows.resize(stripe.rows.size() + stride_);
    std::memcpy(stripe.rows.data() + it->second * stride_, running.data() + index * stride_,
                stride_ * sizeof(float));
  }
  return Status::Ok();
}

void Table::InitializeStoredRow(uint64_t key, std::span<float> row) const {
  InitializeRow(config_.init, key, row.first(config_.dim));
  InitializeOptimizerState(config_.optimizer, config_.dim, row);
}

void Table::LoadRowLocked(uint64_t key, std::span<float> out) const {
  if (!ReadRowLocked(key, out)) InitializeStoredRow(key, out);
}

bool Table::ReadRowLocked(uint64_t key, std::span<float> out) const {
  const Stripe& stripe = StripeOf(key);
  auto it = stripe.index.find(key);
  if (it == stripe.index.end()) return false;
  std::memcpy(out.data(), stripe.rows.data() + it->second * stride_, stride_ * sizeof(float));
  return true;
}

size_t Table::row_count() const {
  size_t n = 0;
  for (const Stripe& stripe : stripes_) {
    std::shared_lock lock(stripe.mu);
    n += stripe.index.size();
  }
  return n;
}

void Table::ForEachRow(const std::function<void(uint64_t, std::span<const float>)>& fn) const {
  for (const Stripe& stripe : stripes_) {
    std::shared_lock lock(stripe.mu);
    for (const auto& [key, row] : stripe.index) {
      fn(key, std::span<const float>(stripe.rows.data() + row * stride_, stride_));
    }
  }
}

Status Table::InsertRow(uint64_t key, std::span<const float> state) {
  if (state.size() != stride_) return InvalidArgument("insert row: wrong row size");
  BX_RETURN_IF_ERROR(ValidateKeys(std::span<const uint64_t>(&key, 1)));
  Stripe& stripe = StripeOf(key);
  std::unique_lock lock(stripe.mu);
  auto [it, inserted] = stripe.index.try_emplace(key, stripe.rows.size() / stride_);
  if (!inserted) {
    return InvalidArgument("insert row: key " + std::to_string(key) + " already present");
  }
  stripe.rows.insert(stripe.rows.end(), state.begin(), state.end());
  return Status::Ok();
}

Status Table::TakeRows(Table& source) {
  if (!(source.config_.id == config_.id && source.stride_ == stride_ &&
        source.config_.dim == config_.dim)) {
    return InvalidArgument("take rows: table " + std::to_string(source.config_.id) +
                           " has a different shape");
  }
  // Same stride and key hash: each key lives in the same stripe in both tables.
  for (size_t i = 0; i < kStripes; ++i) {
    Stripe& to = stripes_[i];
    Stripe& from = source.stripes_[i];
    std::scoped_lock lock(to.mu, from.mu);
    to.index.swap(from.index);
    to.rows.swap(from.rows);
    from.index.clear();
    from.rows.clear();
  }
  return Status::Ok();
}

Result<std::unique_ptr<Table>> Table::Copy() const {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<Table> copy, Create(config_));
  for (size_t i = 0; i < kStripes; ++i) {
    std::shared_lock lock(stripes_[i].mu);
    copy->stripes_[i].index = stripes_[i].index;
    copy->stripes_[i].rows = stripes_[i].rows;
  }
  return copy;
}

}  // namespace bx::ps
