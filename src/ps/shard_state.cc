#include "ps/shard_state.h"

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
         a.max_rows == b.max_rows && a.max_bytes == b.max_bytes;
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

Status ShardState::ApplyPush(const PushRequest& push, uint64_t stamp,
                             std::vector<std::pair<uint32_t, uint64_t>>* evicted,
                             bool pause_between_rows) {
  BX_RETURN_IF_ERROR(ValidatePush(push));
  if (push.sync) return ApplySync(*push.sync, stamp, pause_between_rows);
  if (evicted == nullptr) return table(push.table_id)->Push(push.keys, push.gradients, stamp);
  std::vector<uint64_t> keys;
  BX_RETURN_IF_ERROR(table(push.table_id)->Push(push.keys, push.gradients, stamp, &keys));
  for (uint64_t key : keys) evicted->emplace_back(push.table_id, key);
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
  }
  BX_RETURN_IF_ERROR(copy->dedup_.Import(dedup_.Export()));
  copy->epoch = epoch;
  copy->applied_lsn = applied_lsn;
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
  old->ForEachRow([&](uint64_t key, std::span<const float> state) {
    if (inserted.ok()) inserted = bounded->InsertRow(key, state);
  });
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
    std::erase(mine, id);
  }
  for (uint32_t id : mine) {
    Table* to = table(id);
    BX_ASSIGN_OR_RETURN(std::unique_ptr<Table> empty, Table::Create(to->config()));
    BX_RETURN_IF_ERROR(to->TakeRows(*empty));
  }
  BX_RETURN_IF_ERROR(dedup_.Import(other.dedup_.Export()));
  epoch = other.epoch;
  applied_lsn = other.applied_lsn;
  return Status::Ok();
}

}  // namespace bx::ps
