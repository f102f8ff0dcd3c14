// bx::ps::PsClient (include/bx/ps/client.h): the public face of PsClientCore.
#include "bx/ps/client.h"

#include <future>
#include <utility>

#include "ps/service/ps_service.h"

namespace bx::ps {

PsClient::PsClient(std::unique_ptr<PsClientCore> core) : core_(std::move(core)) {}
PsClient::~PsClient() = default;

Result<std::unique_ptr<PsClient>> PsClient::Create(const ClusterSpec& spec,
                                                   PsClientOptions options) {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<PsClientCore> core,
                      PsClientCore::Create(spec, std::move(options)));
  return std::unique_ptr<PsClient>(new PsClient(std::move(core)));
}

Result<uint32_t> PsClient::TableId(std::string_view name) const {
  if (name.empty()) return InvalidArgument("a table name must not be empty");
  std::string known;
  for (const auto& [table_name, id] : core_->table_names()) {
    if (table_name == name) return id;  // the first: a cluster file's names are unique
    known += (known.empty() ? "\"" : ", \"") + table_name + "\"";
  }
  return NotFound("no table named \"" + std::string(name) + "\" in the cluster file (" +
                  (known.empty() ? "it names no tables" : "its tables: " + known) + ")");
}

void PsClient::FetchAsync(uint32_t table, std::span<const uint64_t> keys,
                          std::chrono::microseconds timeout,
                          std::function<void(Result<FetchResult>)> done) {
  core_->FetchAsync(table, keys, timeout, std::move(done));
}

Result<FetchResult> PsClient::Fetch(uint32_t table, std::span<const uint64_t> keys,
                                    std::chrono::microseconds timeout) {
  return core_->Fetch(table, keys, timeout);
}

Result<FetchResult> PsClient::Fetch(std::string_view table, std::span<const uint64_t> keys,
                                    std::chrono::microseconds timeout) {
  BX_ASSIGN_OR_RETURN(const uint32_t id, TableId(table));
  return Fetch(id, keys, timeout);
}

void PsClient::FetchRowsAsync(uint32_t table, std::span<const uint64_t> keys,
                              std::chrono::microseconds timeout,
                              std::function<void(Result<FetchedRows>)> done) {
  core_->FetchRowsAsync(table, keys, timeout, std::move(done));
}

Result<FetchedRows> PsClient::FetchRows(uint32_t table, std::span<const uint64_t> keys,
                                        std::chrono::microseconds timeout) {
  std::promise<Result<FetchedRows>> promise;
  auto future = promise.get_future();
  core_->FetchRowsAsync(table, keys, timeout, [&promise](Result<FetchedRows> rows) {
    promise.set_value(std::move(rows));
  });
  return future.get();
}

Result<FetchedRows> PsClient::FetchRows(std::string_view table, std::span<const uint64_t> keys,
                                        std::chrono::microseconds timeout) {
  BX_ASSIGN_OR_RETURN(const uint32_t id, TableId(table));
  return FetchRows(id, keys, timeout);
}

FetchedRows FetchedRows::View(rpc::Message reply, const float* values, size_t rows, uint32_t dim) {
  FetchedRows out;
  out.reply_ = std::move(reply);
  out.data_ = values;
  out.rows_ = rows;
  out.dim_ = dim;
  return out;
}

FetchedRows FetchedRows::Gathered(std::vector<float> values, size_t rows, uint32_t dim) {
  FetchedRows out;
  out.gathered_ = std::move(values);
  out.data_ = out.gathered_.data();
  out.rows_ = rows;
  out.dim_ = dim;
  return out;
}

std::vector<float> FetchedRows::TakeVector() && {
  if (!reply_) return std::move(gathered_);
  return std::vector<float>(data_, data_ + rows_ * dim_);
}

void PsClient::PushAsync(uint32_t table, uint32_t dim, std::span<const uint64_t> keys,
                         std::span<const float> gradients, std::chrono::microseconds timeout,
                         std::function<void(Status)> done) {
  core_->PushAsync(table, dim, keys, gradients, timeout, std::move(done));
}

Status PsClient::Push(uint32_t table, uint32_t dim, std::span<const uint64_t> keys,
                      std::span<const float> gradients, std::chrono::microseconds timeout) {
  return core_->Push(table, dim, keys, gradients, timeout);
}

Status PsClient::Push(std::string_view table, uint32_t dim, std::span<const uint64_t> keys,
                      std::span<const float> gradients, std::chrono::microseconds timeout) {
  BX_ASSIGN_OR_RETURN(const uint32_t id, TableId(table));
  return Push(id, dim, keys, gradients, timeout);
}

uint64_t PsClient::client_id() const {
  return core_->client_id();
}

uint32_t PsClient::shard_count() const {
  return core_->shard_count();
}

PsClientStats PsClient::stats() const {
  return core_->stats();
}

}  // namespace bx::ps
