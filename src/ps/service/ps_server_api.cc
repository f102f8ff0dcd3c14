// bx::ps::PsServer and bx::ps::FailoverMonitor (include/bx/ps/server.h): the public faces of
// PsServerCore and FailoverMonitorCore.
#include "bx/ps/server.h"

#include <utility>

#include "ps/service/ps_internals.h"
#include "ps/service/ps_service.h"

namespace bx::ps {

PsServer::PsServer(std::unique_ptr<PsServerCore> core) : core_(std::move(core)) {}
PsServer::~PsServer() = default;

Result<std::unique_ptr<PsServer>> PsServer::Create(const std::vector<TableConfig>& tables,
                                                   PsServerOptions options) {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<PsServerCore> core,
                      PsServerCore::Create(tables, std::move(options)));
  return std::unique_ptr<PsServer>(new PsServer(std::move(core)));
}

Status PsServer::Start(const std::vector<std::string>& urls) {
  return core_->Start(urls);
}

rpc::ReplicaAddress PsServer::address() const {
  return core_->address();
}

Status PsServer::BecomePrimary(uint64_t epoch, const std::vector<rpc::ReplicaAddress>& backups) {
  return core_->BecomePrimary(epoch, backups);
}

void PsServer::Stop() {
  core_->Stop();
}

PsServerCounters PsServer::counters() const {
  return core_->counters();
}

std::vector<PsTableStats> PsServer::table_stats() const {
  return core_->TableStats();
}

uint64_t PsServer::primary_epoch() const {
  const ShardReplica& replica = core_->replica();
  return replica.role() == ShardReplica::Role::kPrimary ? replica.position().epoch : 0;
}

rpc::ServerStats PsServer::rpc_stats() const {
  return core_->rpc_stats();
}

FailoverMonitor::FailoverMonitor(std::unique_ptr<FailoverMonitorCore> core,
                                 std::unique_ptr<LeasedFailoverCore> leased)
    : core_(std::move(core)), leased_(std::move(leased)) {}
FailoverMonitor::~FailoverMonitor() = default;

Result<std::unique_ptr<FailoverMonitor>> FailoverMonitor::Start(PsServer* server,
                                                                FailoverOptions options) {
  if (server == nullptr) return InvalidArgument("FailoverMonitor::Start: no server");
  if (options.config_store.empty() && !options.unsafe_without_leases) {
    return FailedPrecondition(
        "FailoverMonitor::Start: no FailoverOptions::config_store (an etcd member's URL, or "
        "memory://<name> inside one process): failover without leases can leave two primaries "
        "after a pause or a partition; set FailoverOptions::unsafe_without_leases to run it "
        "anyway");
  }
  if (!options.config_store.empty()) {
    BX_ASSIGN_OR_RETURN(std::unique_ptr<LeasedFailoverCore> leased,
                        LeasedFailoverCore::Start(&PsInternals::Core(*server), std::move(options)));
    return std::unique_ptr<FailoverMonitor>(new FailoverMonitor(nullptr, std::move(leased)));
  }
  BX_ASSIGN_OR_RETURN(std::unique_ptr<FailoverMonitorCore> core,
                      FailoverMonitorCore::Start(&PsInternals::Core(*server), std::move(options)));
  return std::unique_ptr<FailoverMonitor>(new FailoverMonitor(std::move(core), nullptr));
}

uint64_t FailoverMonitor::promoted_epoch() const {
  return leased_ ? leased_->promoted_epoch() : core_->promoted_epoch();
}

Result<HandoverResult> FailoverMonitor::HandOver(std::optional<uint32_t> to,
                                                 std::chrono::milliseconds timeout) {
  if (!leased_) {
    return FailedPrecondition(
        "handover needs a configuration store (FailoverOptions::config_store): without one the "
        "successor could not know the shard is its own");
  }
  return leased_->HandOver(to, timeout);
}

}  // namespace bx::ps
