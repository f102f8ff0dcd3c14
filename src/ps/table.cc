#include "ps/table.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

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
  if (c.ttl_seconds > kMaxTtlSeconds) {
    return InvalidArgument(name + ": ttl_seconds above " + std::to_string(kMaxTtlSeconds));
  }
  if (c.admit_after_pushes > kMaxAdmitAfterPushes) {
    return InvalidArgument(name + ": admit_after_pushes above " +
                           std::to_string(kMaxAdmitAfterPushes));
  }
  if (c.kind != TableKind::kEmbedding && (c.ttl_seconds != 0 || c.admit_after_pushes != 0)) {
    return InvalidArgument(name + ": ttl_seconds and admit_after_pushes apply to embedding " +
                           "tables only");
  }
  if (c.max_rows == 0 && c.max_bytes == 0) return Status::Ok();
  if (c.kind != TableKind::kEmbedding) {
    return InvalidArgument(name + ": max_rows and max_bytes bound embedding tables only");
  }
  const uint64_t row_bytes = sizeof(uint64_t) + uint64_t{RowStride(c)} * sizeof(float);
  if (c.max_bytes != 0 && c.max_bytes < row_bytes) {
    return InvalidArgument(name + ": max_bytes " + std::to_string(c.max_bytes) +
                           " is smaller than one row (" + std::to_string(row_bytes) +
                           " bytes: the key, then weights and optimiser state)");
  }
  if (RowLimit(c) > kMaxBoundedRows) {
    return InvalidArgument(name + ": max_rows/max_bytes allow " + std::to_string(RowLimit(c)) +
                           " rows, above the " + std::to_string(kMaxBoundedRows) +
                           " a bounded table holds (leave both 0 for an unbounded table)");
  }
  return Status::Ok();
}

uint64_t Table::RowLimit(const TableConfig& c) {
  if (c.max_bytes == 0) return c.max_rows;
  const uint64_t by_bytes =
      c.max_bytes / (sizeof(uint64_t) + uint64_t{RowStride(c)} * sizeof(float));
  return c.max_rows == 0 ? by_bytes : std::min(c.max_rows, by_bytes);
}

Result<std::unique_ptr<Table>> Table::Create(const TableConfig& config) {
  BX_RETURN_IF_ERROR(ValidateConfig(config));
  return std::unique_ptr<Table>(new Table(config));
}

Table::Table(const TableConfig& config)
    : config_(config),
      stride_(RowStride(config)),
      row_limit_(RowLimit(config)),
      ttl_ms_(config.ttl_seconds * 1000) {}

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

Status Table::Push(std::span<const uint64_t> keys, std::span<const float> gradients,
                   uint64_t now_ms, uint64_t stamp, std::vector<uint64_t>* evicted) {
  const size_t dim = config_.dim;
  if (gradients.size() != keys.size() * dim) {
    return InvalidArgument("push to table " + std::to_string(config_.id) + ": " +
                           std::to_string(gradients.size()) + " gradients for " +
                           std::to_string(keys.size()) + " keys of dim " + std::to_string(dim));
  }
  BX_RETURN_IF_ERROR(ValidateKeys(keys));
  // Row ids of a bounded table stay within 32 bits while no stripe grows past 2^26 slots: at
  // most kMaxBoundedRows stored before the push, fewer new ones in it (the wire allows 2^24).
  if (bounded() && keys.size() >= kMaxBoundedRows) {
    return InvalidArgument("push to bounded table " + std::to_string(config_.id) + ": " +
                           std::to_string(keys.size()) + " keys, at most " +
                           std::to_string(kMaxBoundedRows - 1) + " in one push");
  }
  std::unique_lock<std::mutex> order;
  if (bounded()) order = std::unique_lock(order_mu_);
  // A push whose step would leave a value or an accumulator non-finite (an SGD step with a large
  // learning rate overflows float) changes nothing and is refused whole, so every update is
  // computed and checked before any is stored. The stripes the push touches are held, in stripe
  // order, from the first read to the last write: concurrent pushes stay atomic with each other,
  // and a fetch sees each row whole.
  // A bounded table's writers all hold order_mu_, so its push reads rows unlocked (fetches only
  // read too) and locks each stripe only while writing to it: order_mu_ and up to 64 stripes
  // at once would also pass the 64 locks ThreadSanitizer's deadlock detector can follow.
  std::vector<std::unique_lock<std::shared_mutex>> locks;
  if (!bounded()) {
    std::array<bool, kStripes> touched{};
    for (uint64_t key : keys) touched[StripeIndex(key)] = true;
    for (size_t i = 0; i < kStripes; ++i) {
      if (touched[i]) locks.emplace_back(stripes_[i].mu);
    }
  }
  auto write_lock = [this](size_t s) {
    return bounded() ? std::unique_lock(stripes_[s].mu) : std::unique_lock<std::shared_mutex>();
  };
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
    if (start && ttl_ms_ != 0 && KeyExpiredLocked(keys[i], now_ms)) {
      InitializeStoredRow(keys[i], row);  // evicted below, before the store pass
    } else if (start) {
      LoadRowLocked(keys[i], row);
    }
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
  // The push is taken: rows its stamp expires go first, so its expired keys start again.
  if (ttl_ms_ != 0) ExpireLocked(now_ms, evicted);
  // Store pass: the same arithmetic on the same rows, now in place.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (pushes[keys[i]] > 1) continue;
    const size_t s = StripeIndex(keys[i]);  // held above, or here
    std::unique_lock<std::shared_mutex> stripe_lock = write_lock(s);
    auto [slot, inserted] = FindOrAddRowLocked(s, keys[i]);
    std::span<float> row(stripes_[s].rows.data() + slot * stride_, stride_);
    if (inserted) InitializeStoredRow(keys[i], row);
    ApplyGradient(config_.optimizer, config_.dim, row, gradients.subspan(i * dim, dim));
    stripes_[s].stamps[slot] = stamp;
  }
  for (const auto& [key, index] : running_row) {
    const size_t s = StripeIndex(key);
    std::unique_lock<std::shared_mutex> stripe_lock = write_lock(s);
    const size_t slot = FindOrAddRowLocked(s, key).first;
    std::memcpy(stripes_[s].rows.data() + slot * stride_, running.data() + index * stride_,
                stride_ * sizeof(float));
    stripes_[s].stamps[slot] = stamp;
  }
  if (!bounded()) return Status::Ok();
  // Recency: the push's keys become the newest in push order, so a key pushed twice counts at
  // its last occurrence (not in running_row's hash order, which the order must not depend on).
  for (uint64_t key : keys) {
    const size_t s = StripeIndex(key);
    const size_t slot = stripes_[s].index.find(key)->second;
    if (ttl_ms_ != 0) stripes_[s].pushed_ms[slot] = now_ms;
    const uint32_t id = RowId(s, slot);
    if (id == newest_) continue;
    Unlink(id);
    LinkNewest(id);
  }
  locks.clear();  // the victims' stripes are locked one at a time
  EvictOverBound(evicted);
  return Status::Ok();
}

std::pair<size_t, bool> Table::FindOrAddRowLocked(size_t s, uint64_t key) {
  Stripe& stripe = stripes_[s];
  auto [it, inserted] = stripe.index.try_emplace(key, stripe.rows.size() / stride_);
  if (!inserted) return {it->second, false};
  stripe.rows.resize(stripe.rows.size() + stride_);
  stripe.stamps.push_back(0);
  if (bounded()) {
    stripe.recency.push_back({key, kNoRow, kNoRow});
    if (ttl_ms_ != 0) stripe.pushed_ms.push_back(0);
    LinkNewest(RowId(s, it->second));
    stored_rows_.fetch_add(1, std::memory_order_relaxed);
  }
  return {it->second, true};
}

void Table::Unlink(uint32_t id) {
  Recency& node = Node(id);
  (node.older == kNoRow ? oldest_ : Node(node.older).newer) = node.newer;
  (node.newer == kNoRow ? newest_ : Node(node.newer).older) = node.older;
  node.older = node.newer = kNoRow;
}

void Table::LinkNewest(uint32_t id) {
  Recency& node = Node(id);
  node.older = newest_;
  node.newer = kNoRow;
  (newest_ == kNoRow ? oldest_ : Node(newest_).newer) = id;
  newest_ = id;
}

void Table::EvictOverBound(std::vector<uint64_t>* evicted) {
  // A table with a ttl and no bound still links rows by 32-bit ids: it keeps at most
  // kMaxBoundedRows, its least recently pushed evicted beyond (docs/PS.md).
  const uint64_t limit = row_limit_ != 0 ? row_limit_ : kMaxBoundedRows;
  while (stored_rows_.load(std::memory_order_relaxed) > limit) {
    EvictOldest(evicted);
    evicted_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Table::EvictOldest(std::vector<uint64_t>* evicted) {
  const uint32_t victim = oldest_;
  const size_t s = victim % kStripes, slot = victim / kStripes;
  std::unique_lock lock(stripes_[s].mu);
  const uint64_t key = stripes_[s].recency[slot].key;
  RemoveRowLocked(s, slot, key);
  if (evicted != nullptr) evicted->push_back(key);
}

void Table::RemoveRowLocked(size_t s, size_t slot, uint64_t key) {
  Stripe& stripe = stripes_[s];
  const uint32_t id = RowId(s, slot);
  if (bounded()) Unlink(id);
  stripe.index.erase(key);
  // The stripe's last row moves into the hole, so its arrays shrink: memory a removed row held
  // serves the next new row, and no holes accumulate.
  const size_t last = stripe.stamps.size() - 1;
  if (slot != last) {
    std::memcpy(stripe.rows.data() + slot * stride_, stripe.rows.data() + last * stride_,
                stride_ * sizeof(float));
    stripe.stamps[slot] = stripe.stamps[last];
    if (ttl_ms_ != 0) stripe.pushed_ms[slot] = stripe.pushed_ms[last];
    if (bounded()) {
      Recency& moved = stripe.recency[slot];
      moved = stripe.recency[last];
      stripe.index[moved.key] = slot;
      // Its id is now the removed row's (same stripe, that slot): its neighbours follow.
      (moved.older == kNoRow ? oldest_ : Node(moved.older).newer) = id;
      (moved.newer == kNoRow ? newest_ : Node(moved.newer).older) = id;
    } else {
      // An unbounded table keeps no key per slot: only a sync's full copy or a drop of a key
      // the source evicted (a bounded table there) comes here, so the scan is rare.
      for (auto& [k, row] : stripe.index) {
        if (row == last) {
          row = slot;
          break;
        }
      }
    }
  }
  if (bounded()) {
    stripe.recency.pop_back();
    stored_rows_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (ttl_ms_ != 0) stripe.pushed_ms.pop_back();
  stripe.stamps.pop_back();
  stripe.rows.resize(last * stride_);
}

void Table::ForEachRowChangedAfter(
    uint64_t stamp, const std::function<void(uint64_t, std::span<const float>)>& fn) const {
  for (const Stripe& stripe : stripes_) {
    std::shared_lock lock(stripe.mu);
    for (const auto& [key, row] : stripe.index) {
      if (stripe.stamps[row] <= stamp) continue;
      fn(key, std::span<const float>(stripe.rows.data() + row * stride_, stride_));
    }
  }
}

Status Table::ApplySyncRows(std::span<const uint64_t> dropped, std::span<const uint64_t> keys,
                            std::span<const float> states, uint64_t stamp, bool all_rows,
                            bool pause_between_rows) {
  if (states.size() != keys.size() * stride_) {
    return InvalidArgument("sync of table " + std::to_string(config_.id) + ": " +
                           std::to_string(states.size()) + " floats for " +
                           std::to_string(keys.size()) + " rows of " + std::to_string(stride_));
  }
  BX_RETURN_IF_ERROR(ValidateKeys(keys));
  std::unique_lock<std::mutex> order;
  if (bounded()) order = std::unique_lock(order_mu_);
  if (all_rows) {
    for (Stripe& stripe : stripes_) {
      std::unique_lock lock(stripe.mu);
      stripe.index.clear();
      stripe.rows.clear();
      stripe.recency.clear();
      stripe.pushed_ms.clear();
      stripe.stamps.clear();
    }
    oldest_ = newest_ = kNoRow;  // order_mu_ held: nobody walks the list meanwhile
    stored_rows_.store(0, std::memory_order_relaxed);
  }
  for (uint64_t key : dropped) {
    const size_t s = StripeIndex(key);
    std::unique_lock lock(stripes_[s].mu);
    auto it = stripes_[s].index.find(key);
    if (it != stripes_[s].index.end()) RemoveRowLocked(s, it->second, key);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t s = StripeIndex(keys[i]);
    {
      std::unique_lock lock(stripes_[s].mu);
      const size_t slot = FindOrAddRowLocked(s, keys[i]).first;
      std::memcpy(stripes_[s].rows.data() + slot * stride_, states.data() + i * stride_,
                  stride_ * sizeof(float));
      stripes_[s].stamps[slot] = stamp;
      if (bounded() && RowId(s, slot) != newest_) {
        Unlink(RowId(s, slot));
        LinkNewest(RowId(s, slot));
      }
    }
    if (pause_between_rows) std::this_thread::yield();
  }
  // Within the bound when the source was; a serving table with a smaller bound keeps its newest.
  if (bounded()) EvictOverBound();
  return Status::Ok();
}

bool Table::ExpiredLocked(uint32_t id, uint64_t now_ms) const {
  const uint64_t pushed = stripes_[id % kStripes].pushed_ms[id / kStripes];
  return now_ms >= ttl_ms_ && pushed <= now_ms - ttl_ms_;
}

bool Table::KeyExpiredLocked(uint64_t key, uint64_t now_ms) const {
  const size_t s = StripeIndex(key);
  auto it = stripes_[s].index.find(key);
  return it != stripes_[s].index.end() && ExpiredLocked(RowId(s, it->second), now_ms);
}

// Stamps never decrease along the list (pushes come with a non-decreasing clock), so the
// expired rows are its oldest.
void Table::ExpireLocked(uint64_t now_ms, std::vector<uint64_t>* evicted) {
  while (oldest_ != kNoRow && ExpiredLocked(oldest_, now_ms)) {
    EvictOldest(evicted);
    expired_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Table::Expire(uint64_t now_ms, std::vector<uint64_t>* evicted) {
  if (ttl_ms_ == 0) return;
  std::lock_guard order(order_mu_);
  ExpireLocked(now_ms, evicted);
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

bool Table::Contains(uint64_t key) const {
  const Stripe& stripe = StripeOf(key);
  std::shared_lock lock(stripe.mu);
  return stripe.index.contains(key);
}

size_t Table::row_count() const {
  if (bounded()) return stored_rows_.load(std::memory_order_relaxed);
  size_t n = 0;
  for (const Stripe& stripe : stripes_) {
    std::shared_lock lock(stripe.mu);
    n += stripe.index.size();
  }
  return n;
}

void Table::ForEachRow(const std::function<void(uint64_t, std::span<const float>)>& fn) const {
  ForEachRowPushedAt([&](uint64_t key, uint64_t, std::span<const float> state) { fn(key, state); });
}

void Table::ForEachRowPushedAt(
    const std::function<void(uint64_t, uint64_t, std::span<const float>)>& fn) const {
  if (bounded()) {
    // Every writer of a bounded table holds order_mu_; fetches only read.
    std::lock_guard order(order_mu_);
    for (uint32_t id = oldest_; id != kNoRow;) {
      const Stripe& stripe = stripes_[id % kStripes];
      const size_t slot = id / kStripes;
      fn(stripe.recency[slot].key, ttl_ms_ != 0 ? stripe.pushed_ms[slot] : 0,
         std::span<const float>(stripe.rows.data() + slot * stride_, stride_));
      id = stripe.recency[slot].newer;
    }
    return;
  }
  for (const Stripe& stripe : stripes_) {
    std::shared_lock lock(stripe.mu);
    for (const auto& [key, row] : stripe.index) {
      fn(key, 0, std::span<const float>(stripe.rows.data() + row * stride_, stride_));
    }
  }
}

uint64_t Table::Digest() const {
  uint64_t sum = 0;
  ForEachRowPushedAt([&](uint64_t key, uint64_t pushed_ms, std::span<const float> state) {
    uint64_t h = Mix64(key);
    if (ttl_ms_ != 0) h = Mix64(h ^ pushed_ms);  // replicas must agree on when rows expire
    for (float f : state) {
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      h = Mix64(h ^ bits);
    }
    sum += h;
  });
  return sum;
}

Status Table::InsertRow(uint64_t key, std::span<const float> state, uint64_t pushed_ms) {
  if (state.size() != stride_) return InvalidArgument("insert row: wrong row size");
  BX_RETURN_IF_ERROR(ValidateKeys(std::span<const uint64_t>(&key, 1)));
  std::unique_lock<std::mutex> order;
  if (bounded()) order = std::unique_lock(order_mu_);
  const size_t s = StripeIndex(key);
  {
    std::unique_lock lock(stripes_[s].mu);
    auto [slot, inserted] = FindOrAddRowLocked(s, key);
    if (!inserted) {
      return InvalidArgument("insert row: key " + std::to_string(key) + " already present");
    }
    std::copy(state.begin(), state.end(), stripes_[s].rows.begin() + slot * stride_);
    if (ttl_ms_ != 0) stripes_[s].pushed_ms[slot] = pushed_ms;
  }
  if (bounded()) EvictOverBound();
  return Status::Ok();
}

Status Table::TakeRows(Table& source) {
  if (!(source.config_.id == config_.id && source.stride_ == stride_ &&
        source.config_.dim == config_.dim && source.row_limit_ == row_limit_ &&
        source.ttl_ms_ == ttl_ms_)) {
    return InvalidArgument("take rows: table " + std::to_string(source.config_.id) +
                           " has a different shape or bound");
  }
  std::scoped_lock order(order_mu_, source.order_mu_);
  // Same stride and key hash: each key lives in the same stripe in both tables, and row ids
  // (stripe and slot) mean the same rows.
  for (size_t i = 0; i < kStripes; ++i) {
    Stripe& to = stripes_[i];
    Stripe& from = source.stripes_[i];
    std::scoped_lock lock(to.mu, from.mu);
    to.index.swap(from.index);
    to.rows.swap(from.rows);
    to.recency.swap(from.recency);
    to.pushed_ms.swap(from.pushed_ms);
    to.stamps.swap(from.stamps);
    from.index.clear();
    from.rows.clear();
    from.recency.clear();
    from.pushed_ms.clear();
    from.stamps.clear();
  }
  oldest_ = std::exchange(source.oldest_, kNoRow);
  newest_ = std::exchange(source.newest_, kNoRow);
  stored_rows_.store(source.stored_rows_.exchange(0));
  evicted_.store(source.evicted_.exchange(0));
  expired_.store(source.expired_.exchange(0));
  return Status::Ok();
}

Result<std::unique_ptr<Table>> Table::Copy() const {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<Table> copy, Create(config_));
  std::lock_guard order(order_mu_);  // a bounded table's list and rows, as one
  for (size_t i = 0; i < kStripes; ++i) {
    std::shared_lock lock(stripes_[i].mu);
    copy->stripes_[i].index = stripes_[i].index;
    copy->stripes_[i].rows = stripes_[i].rows;
    copy->stripes_[i].recency = stripes_[i].recency;
    copy->stripes_[i].pushed_ms = stripes_[i].pushed_ms;
    copy->stripes_[i].stamps = stripes_[i].stamps;
  }
  copy->oldest_ = oldest_;
  copy->newest_ = newest_;
  copy->stored_rows_.store(stored_rows_.load());
  copy->evicted_.store(evicted_.load());
  copy->expired_.store(expired_.load());
  return copy;
}

}  // namespace bx::ps
