#include "ps/shard_state.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

namespace bx::ps {
namespace {

bool SameConfig(const TableConfig& a, const TableConfig& b) {
  const InitializerConfig &i = a.init, &j = b.init;
  const OptimizerConfig &o = a.optimizer, &p = b.optimizer;
  return a.id == b.id && a.name == b.name && a.kind == b.kind && a.dim == b.dim &&
         a.dense_rows == b.dense_rows && i.kind == j.kind && i.value == j.value && i.low == j.low &&
         i.high == j.high && i.mean == j.mean && i.stddev == j.stddev && i.seed == j.seed &&
         o.kind == p.kind && o.learning_rate == p.learning_rate &&
         o.initial_accumulator == p.initial_accumulator && o.epsilon == p.epsilon &&
         a.max_rows == b.max_rows && a.max_bytes == b.max_bytes && a.ttl_seconds == b.ttl_seconds &&
         a.admit_after_pushes == b.admit_after_pushes;
}

}  // namespace

Status ShardState::CreateTable(const TableConfig& config) {
  std::unique_lock lock(tables_mu_);
  if (auto it = tables_.find(config.id); it != tables_.end()) {
    if (SameConfig(it->second->config(), config)) return Status::Ok();
    return FailedPrecondition("table " + std::to_string(config.id) +
                              " exists with a different config");
  }
  BX_ASSIGN_OR_RETURN(std::unique_ptr<Table> table, Table::Create(config));
  if (config.admit_after_pushes >= 2) {
    BX_ASSIGN_OR_RETURN(admission_[config.id], PushAdmission::Create(config.admit_after_pushes));
  }
  tables_.emplace(config.id, std::move(table));
  return Status::Ok();
}

Table* ShardState::table(uint32_t id) const {
  std::shared_lock lock(tables_mu_);
  auto it = tables_.find(id);
  return it == tables_.end() ? nullptr : it->second.get();
}

std::vector<uint32_t> ShardState::table_ids() const {
  std::shared_lock lock(tables_mu_);
  std::vector<uint32_t> ids;
  for (const auto& [id, table] : tables_) ids.push_back(id);
  return ids;
}

Status ShardState::ValidatePush(const PushRequest& push) const {
  if (push.sync) {
    for (const SyncTableRows& rows : push.sync->tables) {
      const Table* t = table(rows.table_id);
      if (t == nullptr) return NotFound("sync: no table " + std::to_string(rows.table_id));
      if (rows.stride != t->stride()) {
        return InvalidArgument("sync: table " + std::to_string(rows.table_id) + " rows of " +
                               std::to_string(rows.stride) + " floats, this table's are " +
                               std::to_string(t->stride()) + " (a different dim or optimiser)");
      }
      BX_RETURN_IF_ERROR(t->ValidateKeys(rows.keys));
    }
    return Status::Ok();
  }
  const Table* t = table(push.table_id);
  if (t == nullptr) return NotFound("push: no table " + std::to_string(push.table_id));
  if (push.dim != t->dim()) {
    return InvalidArgument("push: dim " + std::to_string(push.dim) + ", table " +
                           std::to_string(push.table_id) + " has dim " + std::to_string(t->dim()));
  }
  if (push.gradients.size() != push.keys.size() * push.dim) {
    return InvalidArgument("push: gradient count does not match keys x dim");
  }
  return t->ValidateKeys(push.keys);
}

PushAdmission* ShardState::admission(uint32_t id) const {
  std::shared_lock lock(tables_mu_);
  auto it = admission_.find(id);
  return it == admission_.end() ? nullptr : it->second.get();
}

bool ShardState::has_ttl_tables() const {
  std::shared_lock lock(tables_mu_);
  return std::any_of(tables_.begin(), tables_.end(),
                     [](const auto& t) { return t.second->ttl_ms() != 0; });
}

Status ShardState::ApplyPush(const PushRequest& push, uint64_t stamp,
                             std::vector<std::pair<uint32_t, uint64_t>>* evicted,
                             bool pause_between_rows) {
  BX_RETURN_IF_ERROR(ValidatePush(push));
  if (push.sync) return ApplySync(*push.sync, stamp, pause_between_rows);
  Table* target = table(push.table_id);
  // The clock moves, and other tables expire, only once the push is taken: a refused push is
  // not replicated, so it must leave no trace.
  const uint64_t now = std::max(clock_ms, push.stamp_ms);
  std::vector<uint64_t> keys;  // what a table evicted or expired, when the caller asks
  std::vector<uint64_t>* gone = evicted != nullptr ? &keys : nullptr;
  auto record = [&](uint32_t table_id) {
    for (uint64_t key : keys) evicted->emplace_back(table_id, key);
    keys.clear();
  };
  PushAdmission* counts = admission(push.table_id);
  if (counts == nullptr) {
    BX_RETURN_IF_ERROR(target->Push(push.keys, push.gradients, now, stamp, gone));
  } else {
    const PushAdmission::Decision d = counts->Decide(*target, push.keys, push.gradients);
    BX_RETURN_IF_ERROR(d.everything ? target->Push(push.keys, push.gradients, now, stamp, gone)
                                    : target->Push(d.keys, d.gradients, now, stamp, gone));
    counts->Commit(d);
  }
  if (gone != nullptr) record(push.table_id);
  if (now != clock_ms) {
    clock_ms = now;
    for (uint32_t id : table_ids()) {
      table(id)->Expire(now, gone);
      if (gone != nullptr) record(id);
    }
  }
  return Status::Ok();
}

Status ShardState::ApplySync(const SyncBatch& batch, uint64_t stamp, bool pause_between_rows) {
  std::vector<uint32_t> untouched = batch.full ? table_ids() : std::vector<uint32_t>{};
  for (const SyncTableRows& rows : batch.tables) {
    Table* t = table(rows.table_id);
    if (t == nullptr) return NotFound("sync: no table " + std::to_string(rows.table_id));
    BX_RETURN_IF_ERROR(t->ApplySyncRows(rows.dropped, rows.keys, rows.states, stamp, batch.full,
                                        pause_between_rows));
    std::erase(untouched, rows.table_id);
  }
  for (uint32_t id : untouched)
    BX_RETURN_IF_ERROR(table(id)->ApplySyncRows({}, {}, {}, stamp, true));
  synced = Synced{batch.source_epoch, batch.source_lsn, batch.asked_at_ms};
  return Status::Ok();
}

Result<std::unique_ptr<ShardState>> ShardState::Copy() const {
  auto copy = std::make_unique<ShardState>(dedup_.options());
  {
    std::shared_lock lock(tables_mu_);
    for (const auto& [id, table] : tables_) {
      BX_ASSIGN_OR_RETURN(copy->tables_[id], table->Copy());
    }
    for (const auto& [id, counts] : admission_) copy->admission_[id] = counts->Copy();
  }
  BX_RETURN_IF_ERROR(copy->dedup_.Import(dedup_.Export()));
  copy->epoch = epoch;
  copy->applied_lsn = applied_lsn;
  copy->clock_ms = clock_ms;
  copy->synced = synced;
  return copy;
}

Status ShardState::Rebound(uint32_t id, uint64_t max_rows, uint64_t max_bytes) {
  Table* old = table(id);
  if (old == nullptr) return NotFound("rebound: no table " + std::to_string(id));
  TableConfig config = old->config();
  config.max_rows = max_rows;
  config.max_bytes = max_bytes;
  BX_ASSIGN_OR_RETURN(std::unique_ptr<Table> bounded, Table::Create(config));
  Status inserted;
  old->ForEachRowPushedAt([&](uint64_t key, uint64_t pushed_ms, std::span<const float> state) {
    if (inserted.ok()) inserted = bounded->InsertRow(key, state, pushed_ms);
  });
  bounded->set_expired(old->expired());
  BX_RETURN_IF_ERROR(inserted);
  std::unique_lock lock(tables_mu_);
  tables_[id] = std::move(bounded);
  return Status::Ok();
}

Status ShardState::Adopt(ShardState& other) {
  std::vector<uint32_t> mine = table_ids();
  for (uint32_t id : other.table_ids()) {
    Table* from = other.table(id);
    BX_RETURN_IF_ERROR(CreateTable(from->config()));  // no-op when it exists, identical
    BX_RETURN_IF_ERROR(table(id)->TakeRows(*from));
    PushAdmission* counts = admission(id);
    if (counts != nullptr) {
      const PushAdmission* theirs = other.admission(id);
      BX_RETURN_IF_ERROR(counts->Restore(theirs->counters(), theirs->since_halving(),
                                         theirs->admitted(), theirs->rejected()));
    }
    std::erase(mine, id);
  }
  for (uint32_t id : mine) {
    Table* to = table(id);
    BX_ASSIGN_OR_RETURN(std::unique_ptr<Table> empty, Table::Create(to->config()));
    BX_RETURN_IF_ERROR(to->TakeRows(*empty));
    if (PushAdmission* counts = admission(id); counts != nullptr) {
      std::vector<uint16_t> zeros(counts->counters().size());
      BX_RETURN_IF_ERROR(counts->Restore(zeros, 0, 0, 0));
    }
  }
  BX_RETURN_IF_ERROR(dedup_.Import(other.dedup_.Export()));
  epoch = other.epoch;
  applied_lsn = other.applied_lsn;
  clock_ms = other.clock_ms;
  return Status::Ok();
}

}  // namespace bx::ps
