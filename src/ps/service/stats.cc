// "ps.Stat" (docs/PS.md "Inspection"): a replica's role, position, counters and tables as a
// JSON object, and QueryClusterStats, which asks every replica of a cluster at once.
#include <future>
#include <utility>

#include <nlohmann/json.hpp>

#include "bx/ps/stats.h"
#include "ps/service/ps_service.h"

namespace bx::ps {
namespace {

using nlohmann::json;

// The counters by name, both ways (the JSON object and PsServerCounters).
template <typename Counters, typename Fn>
void ForEachCounter(Counters& c, Fn fn) {
  fn("fetches", c.fetches);
  fn("pushes_acked", c.pushes_acked);
  fn("pushes_duplicate", c.pushes_duplicate);
  fn("push_errors", c.push_errors);
  fn("forwards", c.forwards);
  fn("replica_method_refusals", c.replica_method_refusals);
  fn("pushes_below_min_in_sync", c.pushes_below_min_in_sync);
  fn("pushes_session_refused", c.pushes_session_refused);
  fn("dedup_clients", c.dedup_clients);
  fn("dedup_evictions", c.dedup_evictions);
  fn("checkpoints", c.checkpoints);
}

// The fields a replica reports (not shard, replica, address or status: the asker's).
Result<ReplicaStats> ParseStats(std::span<const std::byte> bytes) {
  ReplicaStats stats;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  json j = json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  auto u64 = [&](const json& object, const char* key, uint64_t* value) {
    auto it = object.find(key);
    if (it == object.end() || !it->is_number_unsigned()) return false;
    *value = it->get<uint64_t>();
    return true;
  };
  if (j.is_discarded() || !j.is_object() || !j["role"].is_string() ||
      !u64(j, "epoch", &stats.epoch) || !u64(j, "lsn", &stats.lsn) ||
      !u64(j, "live_backups", &stats.live_backups) || !j["counters"].is_object() ||
      !j["tables"].is_array()) {
    return DataLoss("ps.Stat: malformed reply");
  }
  stats.role = j["role"].get<std::string>();
  const json& last = j["last_checkpoint"];
  bool ok = last.is_object() && u64(last, "unix_ms", &stats.last_checkpoint_unix_ms) &&
            u64(last, "epoch", &stats.last_checkpoint_epoch) &&
            u64(last, "lsn", &stats.last_checkpoint_lsn);
  if (const json& sync = j["sync"]; sync.is_object()) {
    stats.follower = true;
    ok = ok && u64(sync, "epoch", &stats.synced_epoch) && u64(sync, "lsn", &stats.synced_lsn) &&
         u64(sync, "asked_unix_ms", &stats.synced_asked_unix_ms) &&
         u64(sync, "lag_ms", &stats.sync_lag_ms) && u64(sync, "applied", &stats.syncs_applied) &&
         u64(sync, "full_copies", &stats.sync_full_copies);
  }
  ForEachCounter(stats.counters,
                 [&](const char* name, uint64_t& v) { ok = ok && u64(j["counters"], name, &v); });
  for (const json& t : j["tables"]) {
    PsTableStats table;
    uint64_t id = 0, dim = 0;
    ok = ok && t.is_object() && u64(t, "id", &id) && u64(t, "dim", &dim) &&
         u64(t, "rows", &table.rows) && u64(t, "bytes", &table.bytes) && t["name"].is_string();
    if (!ok) break;
    // Replicas older than bounded tables say nothing of them: 0, as for an unbounded table.
    u64(t, "row_limit", &table.row_limit);
    u64(t, "evicted", &table.evicted);
    u64(t, "expired", &table.expired);
    u64(t, "admitted", &table.admitted);
    u64(t, "admission_rejected", &table.admission_rejected);
    u64(t, "digest", &table.digest);
    table.id = uint32_t(id);
    table.dim = uint32_t(dim);
    table.name = t["name"].get<std::string>();
    stats.tables.push_back(std::move(table));
  }
  if (!ok) return DataLoss("ps.Stat: malformed reply");
  return stats;
}

}  // namespace

void PsServerCore::OnStat(rpc::ServerCall call) {
  json out;
  out["role"] = ShardReplica::RoleName(replica_.role());
  const ShardReplica::Position position = replica_.position();
  out["epoch"] = position.epoch;
  out["lsn"] = position.lsn;
  out["live_backups"] = uint64_t(replica_.live_backups());
  PsServerCounters c = counters();
  json counters_json = json::object();
  ForEachCounter(c, [&](const char* name, uint64_t v) { counters_json[name] = v; });
  out["counters"] = std::move(counters_json);
  // A request of one byte with bit 0 set asks for the tables' digests too (a scan of each).
  const std::span<const std::byte> request = Bytes(call.request());
  const bool digest = request.size() == 1 && (uint8_t(request[0]) & 1) != 0;
  json tables = json::array();
  for (const PsTableStats& t : TableStats(digest)) {
    json table = {{"id", t.id},
                  {"name", t.name},
                  {"dim", t.dim},
                  {"rows", t.rows},
                  {"bytes", t.bytes},
                  {"row_limit", t.row_limit},
                  {"evicted", t.evicted},
                  {"expired", t.expired},
                  {"admitted", t.admitted},
                  {"admission_rejected", t.admission_rejected}};
    if (digest) table["digest"] = t.digest;
    tables.push_back(std::move(table));
  }
  out["tables"] = std::move(tables);
  const auto [at, unix_ms] = LastCheckpoint();
  out["last_checkpoint"] = {{"unix_ms", unix_ms}, {"epoch", at.epoch}, {"lsn", at.lsn}};
  if (replica_.follower()) {
    const ShardState::Synced synced = replica_.synced();
    out["sync"] = {{"epoch", synced.epoch},
                   {"lsn", synced.lsn},
                   {"asked_unix_ms", synced.asked_at_ms},
                   {"lag_ms", SyncLagMs(synced)},
                   {"applied", replica_.syncs_applied()},
                   {"full_copies", replica_.sync_full_copies()}};
  }
  const std::string text = out.dump();
  Result<rpc::Message> reply = rpc::Message::Allocate(text.size());
  if (!reply.ok()) return call.Fail(reply.status());
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(reply->data()));
  call.Respond(std::move(reply).value());
}

std::vector<ReplicaStats> QueryClusterStats(const ClusterSpec& cluster,
                                            std::chrono::milliseconds timeout,
                                            rpc::ClientOptions client, bool digests) {
  if (client.transport.auth_secret.empty()) client.transport.auth_secret = cluster.secret;
  client.log = client.log ? client.log : [](std::string_view) {};
  std::vector<ReplicaStats> out;
  std::vector<rpc::ReplicaAddress> addresses;  // rdma preferred, tcp the fallback
  std::vector<std::future<Result<ReplicaStats>>> asked;
  for (uint32_t s = 0; s < cluster.shards.size(); ++s) {
    for (uint32_t r = 0; r < cluster.shards[s].replicas.size(); ++r) {
      const ReplicaSpec& spec = cluster.shards[s].replicas[r];
      ReplicaStats stats;
      stats.shard = s;
      stats.replica = r;
      addresses.push_back({cluster.transport == "tcp" ? "" : spec.rdma, spec.tcp});
      stats.address = addresses.back().ToString();
      out.push_back(std::move(stats));
    }
  }
  for (const rpc::ReplicaAddress& address : addresses) {
    asked.push_back(std::async(
        std::launch::async, [&address, &client, timeout, digests]() -> Result<ReplicaStats> {
          BX_ASSIGN_OR_RETURN(std::unique_ptr<rpc::Client> rpc_client,
                              rpc::Client::Create({address}, client));
          BX_ASSIGN_OR_RETURN(rpc::Message request, rpc::Message::Allocate(digests ? 1 : 0));
          if (digests) request.data()[0] = std::byte{1};
          BX_ASSIGN_OR_RETURN(rpc::Message reply,
                              CallOnce(*rpc_client, kStatMethod, std::move(request), timeout));
          return ParseStats(Bytes(reply));
        }));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    Result<ReplicaStats> answer = asked[i].get();
    if (!answer.ok()) {
      out[i].status = answer.status();
      continue;
    }
    answer->shard = out[i].shard;
    answer->replica = out[i].replica;
    answer->address = std::move(out[i].address);
    out[i] = std::move(answer).value();
  }
  return out;
}

}  // namespace bx::ps
