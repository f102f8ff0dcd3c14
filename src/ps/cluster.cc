// The cluster file parser (include/bx/ps/cluster.h) and key-to-shard routing.
#include "bx/ps/cluster.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "bx/transport.h"
#include "ps/optimizer.h"
#include "ps/table.h"

namespace bx::ps {
namespace {

using nlohmann::json;

// Sanity bounds: a cluster file is written by people; anything this large is a mistake.
constexpr size_t kMaxShards = 1 << 20;
constexpr size_t kMaxReplicas = 64;
constexpr off_t kMaxSecretBytes = 4096;

Status Bad(const std::string& path, const std::string& what) {
  return InvalidArgument("cluster file: " + path + ": " + what);
}

// Reads an optional number field into *out; errors when present with the wrong type/range.
template <typename T>
Status GetNumber(const json& object, const std::string& path, const char* key, T* out) {
  auto it = object.find(key);
  if (it == object.end()) return Status::Ok();
  const std::string where = path + "." + key;
  if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) return Bad(where, "expected a number");
    *out = it->template get<T>();
  } else {
    if (!it->is_number_integer() ||
        (it->is_number_integer() && !it->is_number_unsigned() && it->template get<int64_t>() < 0)) {
      return Bad(where, "expected a non-negative integer");
    }
    uint64_t v = it->template get<uint64_t>();
    if (v > std::numeric_limits<T>::max()) return Bad(where, "value too large");
    *out = static_cast<T>(v);
  }
  return Status::Ok();
}

Status CheckKeys(const json& object, const std::string& path, std::set<std::string> allowed) {
  if (!object.is_object()) return Bad(path, "expected an object");
  for (const auto& [key, value] : object.items()) {
    if (!allowed.contains(key)) return Bad(path, "unknown field \"" + key + "\"");
  }
  return Status::Ok();
}

template <typename E>
Status GetEnum(const json& object, const std::string& path, const char* key,
               const std::map<std::string, E>& names, E* out) {
  auto it = object.find(key);
  if (it == object.end()) return Status::Ok();
  std::string known;
  for (const auto& [name, value] : names) known += (known.empty() ? "" : ", ") + name;
  if (!it->is_string()) return Bad(path + "." + key, "expected one of " + known);
  auto found = names.find(it->template get<std::string>());
  if (found == names.end()) {
    return Bad(path + "." + key,
               "\"" + it->template get<std::string>() + "\" is not one of " + known);
  }
  *out = found->second;
  return Status::Ok();
}

const std::map<std::string, TableKind> kTableKinds = {{"embedding", TableKind::kEmbedding},
                                                      {"dense", TableKind::kDense}};
const std::map<std::string, InitializerKind> kInitKinds = {{"zeros", InitializerKind::kZeros},
                                                           {"constant", InitializerKind::kConstant},
                                                           {"uniform", InitializerKind::kUniform},
                                                           {"normal", InitializerKind::kNormal}};
const std::map<std::string, OptimizerKind> kOptimizerKinds = {{"sgd", OptimizerKind::kSgd},
                                                              {"adagrad", OptimizerKind::kAdagrad}};

template <typename E>
std::string NameOf(const std::map<std::string, E>& names, E value) {
  for (const auto& [name, v] : names) {
    if (v == value) return name;
  }
  return "?";
}

// max_rows and max_bytes (docs/PS.md "Bounded tables"), after the rest: a row's size depends
// on dim and the optimiser.
Status ParseBounds(const json& j, const std::string& path, TableConfig* t) {
  BX_RETURN_IF_ERROR(GetNumber(j, path, "max_rows", &t->max_rows));
  BX_RETURN_IF_ERROR(GetNumber(j, path, "max_bytes", &t->max_bytes));
  if (t->max_rows == 0 && t->max_bytes == 0) return Status::Ok();
  const std::string which = path + (j.contains("max_rows") ? ".max_rows" : ".max_bytes");
  if (t->kind != TableKind::kEmbedding) {
    return Bad(which, "only embedding tables are bounded (a dense table has its rows)");
  }
  const uint64_t row_bytes = sizeof(uint64_t) + uint64_t{RowStride(*t)} * sizeof(float);
  if (t->max_bytes != 0 && t->max_bytes < row_bytes) {
    return Bad(path + ".max_bytes", std::to_string(t->max_bytes) + " is smaller than one row (" +
                                        std::to_string(row_bytes) +
                                        " bytes: the key, weights and optimiser state)");
  }
  if (Table::RowLimit(*t) > kMaxBoundedRows) {
    return Bad(which, "allows " + std::to_string(Table::RowLimit(*t)) + " rows, above the " +
                          std::to_string(kMaxBoundedRows) + " a bounded table holds");
  }
  return Status::Ok();
}

// ttl_seconds and admit_after_pushes (docs/PS.md "Expiry and admission").
Status ParseExpiryAndAdmission(const json& j, const std::string& path, TableConfig* t) {
  BX_RETURN_IF_ERROR(GetNumber(j, path, "ttl_seconds", &t->ttl_seconds));
  BX_RETURN_IF_ERROR(GetNumber(j, path, "admit_after_pushes", &t->admit_after_pushes));
  if (t->ttl_seconds > kMaxTtlSeconds) {
    return Bad(path + ".ttl_seconds",
               "at most " + std::to_string(kMaxTtlSeconds) + " (ten years; 0: rows never expire)");
  }
  if (t->admit_after_pushes > kMaxAdmitAfterPushes) {
    return Bad(path + ".admit_after_pushes",
               "at most " + std::to_string(kMaxAdmitAfterPushes) + " (0: admit every id)");
  }
  if (t->kind != TableKind::kEmbedding) {
    if (t->ttl_seconds != 0) return Bad(path + ".ttl_seconds", "only embedding rows expire");
    if (t->admit_after_pushes != 0) {
      return Bad(path + ".admit_after_pushes", "only embedding tables admit ids");
    }
  }
  return Status::Ok();
}

Status ParseTable(const json& j, const std::string& path, TableConfig* t) {
  BX_RETURN_IF_ERROR(CheckKeys(j, path,
                               {"id", "name", "kind", "dim", "rows", "init", "optimizer",
                                "max_rows", "max_bytes", "ttl_seconds", "admit_after_pushes"}));
  if (!j.contains("id")) return Bad(path, "missing \"id\"");
  if (!j.contains("dim")) return Bad(path, "missing \"dim\"");
  BX_RETURN_IF_ERROR(GetNumber(j, path, "id", &t->id));
  BX_RETURN_IF_ERROR(GetNumber(j, path, "dim", &t->dim));
  BX_RETURN_IF_ERROR(GetNumber(j, path, "rows", &t->dense_rows));
  BX_RETURN_IF_ERROR(GetEnum(j, path, "kind", kTableKinds, &t->kind));
  if (auto it = j.find("name"); it != j.end()) {
    if (!it->is_string()) return Bad(path + ".name", "expected a string");
    t->name = it->get<std::string>();
  }
  if (t->dim == 0 || t->dim > kMaxDim) {
    return Bad(path + ".dim", "must be 1.." + std::to_string(kMaxDim));
  }
  if (t->kind == TableKind::kDense && (t->dense_rows == 0 || t->dense_rows > kMaxDenseRows)) {
    return Bad(path + ".rows", "a dense table needs 1.." + std::to_string(kMaxDenseRows) + " rows");
  }
  if (t->kind == TableKind::kEmbedding && t->dense_rows != 0) {
    return Bad(path + ".rows", "only dense tables have rows");
  }
  if (auto it = j.find("init"); it != j.end()) {
    const std::string p = path + ".init";
    BX_RETURN_IF_ERROR(
        CheckKeys(*it, p, {"kind", "value", "low", "high", "mean", "stddev", "seed"}));
    InitializerConfig& c = t->init;
    BX_RETURN_IF_ERROR(GetEnum(*it, p, "kind", kInitKinds, &c.kind));
    BX_RETURN_IF_ERROR(GetNumber(*it, p, "value", &c.value));
    BX_RETURN_IF_ERROR(GetNumber(*it, p, "low", &c.low));
    BX_RETURN_IF_ERROR(GetNumber(*it, p, "high", &c.high));
    BX_RETURN_IF_ERROR(GetNumber(*it, p, "mean", &c.mean));
    BX_RETURN_IF_ERROR(GetNumber(*it, p, "stddev", &c.stddev));
    BX_RETURN_IF_ERROR(GetNumber(*it, p, "seed", &c.seed));
    if (c.kind == InitializerKind::kUniform && !(c.low < c.high)) {
      return Bad(p, "uniform needs low < high");
    }
    if (c.kind == InitializerKind::kNormal && !(c.stddev >= 0)) {
      return Bad(p, "normal needs stddev >= 0");
    }
  }
  if (auto it = j.find("optimizer"); it != j.end()) {
    const std::string p = path + ".optimizer";
    BX_RETURN_IF_ERROR(
        CheckKeys(*it, p, {"kind", "learning_rate", "initial_accumulator", "epsilon"}));
    OptimizerConfig& o = t->optimizer;
    BX_RETURN_IF_ERROR(GetEnum(*it, p, "kind", kOptimizerKinds, &o.kind));
    BX_RETURN_IF_ERROR(GetNumber(*it, p, "learning_rate", &o.learning_rate));
    BX_RETURN_IF_ERROR(GetNumber(*it, p, "initial_accumulator", &o.initial_accumulator));
    BX_RETURN_IF_ERROR(GetNumber(*it, p, "epsilon", &o.epsilon));
    if (!(o.learning_rate > 0)) return Bad(p + ".learning_rate", "must be > 0");
    if (!(o.initial_accumulator >= 0)) return Bad(p + ".initial_accumulator", "must be >= 0");
    if (!(o.epsilon > 0)) return Bad(p + ".epsilon", "must be > 0");
  }
  BX_RETURN_IF_ERROR(ParseBounds(j, path, t));
  return ParseExpiryAndAdmission(j, path, t);
}

// A replica address: scheme://host:port with a port other replicas can reach (1-65535). Both
// schemes listen on a TCP port (rdma:// for its bootstrap), so no two addresses in the file may
// share host and port: `endpoints` maps "host:port" to the path that named it first.
Status ParseAddress(const json& replica, const std::string& path, const char* scheme,
                    std::map<std::string, std::string>& endpoints, std::string* out) {
  auto it = replica.find(scheme);
  if (it == replica.end()) return Status::Ok();
  const std::string field = path + "." + scheme;
  const std::string prefix = std::string(scheme) + "://";
  if (!it->is_string()) return Bad(field, "expected a string");
  std::string s = it->get<std::string>();
  Result<Url> url = ParseUrl(s);
  if (s.rfind(prefix, 0) != 0 || !url.ok()) {
    return Bad(field, "\"" + s + "\" is not a " + prefix + "host:port address");
  }
  if (url->port == 0) return Bad(field, "\"" + s + "\" needs a port from 1 to 65535");
  Url endpoint = *url;
  endpoint.scheme = "tcp";  // the same TCP port whichever scheme listens on it
  auto [first, inserted] = endpoints.emplace(endpoint.ToString(), field);
  if (!inserted) {
    return Bad(field, "\"" + s + "\" uses the host and port of " + first->second +
                          " (every replica address needs a port of its own)");
  }
  *out = std::move(s);
  return Status::Ok();
}

// A secret (`field` names it): the file's contents without surrounding whitespace. The file must be
// a regular file that only its owner can read or write, as ssh insists for private keys.
Result<std::string> ReadSecretFile(const char* field, const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::FromErrno(errno, std::string(field) + " " + path.string());
  }
  if (!S_ISREG(st.st_mode)) return Bad(field, path.string() + " is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", unsigned(st.st_mode & 07777));
    return Bad(field, path.string() + " is open to other users (mode " + mode +
                          "); make it readable by its owner only (chmod 600)");
  }
  if (st.st_size > kMaxSecretBytes) {
    return Bad(field,
               path.string() + " is larger than " + std::to_string(kMaxSecretBytes) + " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  const char* space = " \t\r\n";
  secret.erase(secret.find_last_not_of(space) + 1);
  secret.erase(0, secret.find_first_not_of(space));
  if (secret.empty()) return Bad(field, path.string() + " is empty");
  return secret;
}

// "rdma": {"gid_index": 0..255, "traffic_class": 0..255, "service_level": 0..15}, each optional.
Status ParseRdmaSettings(const json& j, ClusterSpec::RdmaSettings* out) {
  BX_RETURN_IF_ERROR(CheckKeys(j, "rdma", {"gid_index", "traffic_class", "service_level"}));
  const std::pair<const char*, int*> fields[] = {{"gid_index", &out->gid_index},
                                                 {"traffic_class", &out->traffic_class},
                                                 {"service_level", &out->service_level}};
  for (const auto& [key, value] : fields) {
    if (!j.contains(key)) continue;
    uint8_t v = 0;
    BX_RETURN_IF_ERROR(GetNumber(j, "rdma", key, &v));
    *value = v;
  }
  if (out->service_level > 15) return Bad("rdma.service_level", "must be 0..15");
  return Status::Ok();
}

// The endpoints "ip:port" an address resolves to (none for a host this machine cannot resolve:
// it cannot alias one that resolves).
std::set<std::string> ResolvedEndpoints(const std::string& address) {
  std::set<std::string> out;
  Result<Url> url = ParseUrl(address);
  if (!url.ok()) return out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(url->port);
  if (getaddrinfo(url->host.c_str(), port.c_str(), &hints, &found) != 0) return out;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char host[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) ==
        0) {
      out.insert(std::string(host) + ":" + port);
    }
  }
  freeaddrinfo(found);
  return out;
}

// Two replica addresses that differ as text but resolve to one endpoint ("tcp://localhost:7001"
// and "tcp://127.0.0.1:7001") would make a replica its own backup: a primary forwarding to
// itself never acknowledges. Both schemes listen on a TCP port, so all addresses are compared.
Status CheckResolvedEndpoints(const ClusterSpec& spec) {
  std::map<std::string, std::pair<std::string, std::string>> seen;  // endpoint -> (path, address)
  for (size_t s = 0; s < spec.shards.size(); ++s) {
    for (size_t r = 0; r < spec.shards[s].replicas.size(); ++r) {
      const ReplicaSpec& replica = spec.shards[s].replicas[r];
      for (auto [scheme, address] : {std::pair{"rdma", &replica.rdma}, {"tcp", &replica.tcp}}) {
        if (address->empty()) continue;
        const std::string path =
            "shards[" + std::to_string(s) + "].replicas[" + std::to_string(r) + "]." + scheme;
        for (const std::string& endpoint : ResolvedEndpoints(*address)) {
          auto [first, inserted] = seen.emplace(endpoint, std::pair{path, *address});
          if (!inserted && first->second.second != *address) {
            return Bad(path, "\"" + *address + "\" and " + first->second.first + " \"" +
                                 first->second.second + "\" are the same endpoint (" + endpoint +
                                 ") once resolved: every replica address needs a port of its own");
          }
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ClusterSpec> ParseClusterSpec(std::string_view json_text) {
  json root = json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgument("cluster file: not valid JSON");
  BX_RETURN_IF_ERROR(
      CheckKeys(root, "(root)",
                {"version", "transport", "secret_file", "replica_secret_file", "config_store",
                 "rdma", "tables", "shards", "min_in_sync", "insecure"}));
  uint32_t version = 0;
  BX_RETURN_IF_ERROR(GetNumber(root, "(root)", "version", &version));
  if (version != 1) return Bad("version", "must be 1");

  ClusterSpec spec;
  if (auto it = root.find("transport"); it != root.end()) {
    if (!it->is_string() || (*it != "rdma" && *it != "tcp")) {
      return Bad("transport", "expected \"rdma\" or \"tcp\"");
    }
    spec.transport = it->get<std::string>();
  }
  for (auto [key, out] : {std::pair{"secret_file", &spec.secret_file},
                          std::pair{"replica_secret_file", &spec.replica_secret_file}}) {
    if (auto it = root.find(key); it != root.end()) {
      if (!it->is_string() || it->get<std::string>().empty()) {
        return Bad(key, "expected the path of a file");
      }
      *out = it->get<std::string>();
    }
  }
  if (!spec.replica_secret_file.empty() && spec.secret_file.empty()) {
    return Bad("replica_secret_file", "needs a secret_file: replicas prove it in its stead");
  }
  if (auto it = root.find("insecure"); it != root.end()) {
    if (!it->is_boolean()) return Bad("insecure", "expected true or false");
    spec.insecure = it->get<bool>();
    if (spec.insecure && !spec.secret_file.empty()) {
      return Bad("insecure", "contradicts secret_file: a cluster with a secret is not open");
    }
  }
  if (auto it = root.find("config_store"); it != root.end()) {
    // One etcd client URL, or the members' (a list, or one string with commas as etcdctl's
    // --endpoints): the store moves to the next member when one does not answer.
    std::string urls;
    for (const json& url : it->is_array() ? *it : json::array({*it})) {
      if (!url.is_string() || !url.get<std::string>().starts_with("http://") ||
          url.get<std::string>().size() <= 7) {
        return Bad("config_store",
                   "expected an etcd client URL, http://host:port, or a list of them");
      }
      urls += (urls.empty() ? "" : ",") + url.get<std::string>();
    }
    if (urls.empty()) return Bad("config_store", "expected at least one etcd client URL");
    spec.config_store = urls;
  }

  if (auto it = root.find("rdma"); it != root.end()) {
    BX_RETURN_IF_ERROR(ParseRdmaSettings(*it, &spec.rdma));
  }
  if (auto it = root.find("tables"); it != root.end()) {
    if (!it->is_array()) return Bad("tables", "expected an array");
    std::set<uint32_t> ids;
    std::set<std::string> names;  // a name must mean one table (PsClient::TableId)
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string path = "tables[" + std::to_string(i) + "]";
      TableConfig t;
      BX_RETURN_IF_ERROR(ParseTable((*it)[i], path, &t));
      if (!ids.insert(t.id).second) return Bad(path + ".id", "duplicate table id");
      if (!t.name.empty() && !names.insert(t.name).second) {
        return Bad(path + ".name", "duplicate table name \"" + t.name + "\"");
      }
      spec.tables.push_back(std::move(t));
    }
  }

  auto shards = root.find("shards");
  if (shards == root.end()) return Bad("(root)", "missing \"shards\"");
  if (!shards->is_array() || shards->empty() || shards->size() > kMaxShards) {
    return Bad("shards", "expected an array of 1.." + std::to_string(kMaxShards) + " shards");
  }
  std::map<std::string, std::string> endpoints;  // host:port -> the field that named it
  for (size_t s = 0; s < shards->size(); ++s) {
    const std::string path = "shards[" + std::to_string(s) + "]";
    const json& shard = (*shards)[s];
    BX_RETURN_IF_ERROR(CheckKeys(shard, path, {"replicas"}));
    auto replicas = shard.find("replicas");
    if (replicas == shard.end() || !replicas->is_array() || replicas->empty() ||
        replicas->size() > kMaxReplicas) {
      return Bad(path + ".replicas",
                 "expected an array of 1.." + std::to_string(kMaxReplicas) + " replicas");
    }
    ShardSpec shard_spec;
    for (size_t r = 0; r < replicas->size(); ++r) {
      const std::string rpath = path + ".replicas[" + std::to_string(r) + "]";
      BX_RETURN_IF_ERROR(CheckKeys((*replicas)[r], rpath, {"rdma", "tcp"}));
      ReplicaSpec replica;
      BX_RETURN_IF_ERROR(ParseAddress((*replicas)[r], rpath, "rdma", endpoints, &replica.rdma));
      BX_RETURN_IF_ERROR(ParseAddress((*replicas)[r], rpath, "tcp", endpoints, &replica.tcp));
      if (replica.rdma.empty() && replica.tcp.empty()) {
        return Bad(rpath, "needs an \"rdma\" or \"tcp\" address");
      }
      shard_spec.replicas.push_back(std::move(replica));
    }
    spec.shards.push_back(std::move(shard_spec));
  }
  if (root.contains("min_in_sync")) {
    BX_RETURN_IF_ERROR(GetNumber(root, "(root)", "min_in_sync", &spec.min_in_sync));
    for (size_t s = 0; s < spec.shards.size(); ++s) {
      if (spec.min_in_sync == 0 || spec.min_in_sync > spec.shards[s].replicas.size()) {
        return Bad("min_in_sync", "expected 1.." + std::to_string(spec.shards[s].replicas.size()) +
                                      ": shards[" + std::to_string(s) + "] has " +
                                      std::to_string(spec.shards[s].replicas.size()) +
                                      " replicas, and a shard with fewer in sync than this "
                                      "could never acknowledge a push");
      }
    }
  }
  return spec;
}

size_t MinInSyncOf(const ClusterSpec& spec, size_t shard) {
  if (spec.min_in_sync != 0) return spec.min_in_sync;
  return shard < spec.shards.size() && spec.shards[shard].replicas.size() >= 3 ? 2 : 1;
}

Result<ClusterSpec> LoadClusterFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cluster file " + path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  Result<ClusterSpec> spec = ParseClusterSpec(text.str());
  if (!spec.ok()) return spec.status().WithContext(path);
  if (Status s = CheckResolvedEndpoints(*spec); !s.ok()) return s.WithContext(path);
  // An open cluster must be chosen, not left by omission.
  if (spec->secret_file.empty() && !spec->insecure) {
    return Bad("secret_file",
               "missing: without a cluster secret every server would answer anyone who can "
               "connect. Name a file holding the secret (chmod 600), or set \"insecure\": true "
               "for an open cluster on a network you trust")
        .WithContext(path);
  }
  // Relative to the cluster file, so a directory of configuration moves as one.
  for (auto [field, file, out] :
       {std::tuple{"secret_file", &spec->secret_file, &spec->secret},
        std::tuple{"replica_secret_file", &spec->replica_secret_file, &spec->replica_secret}}) {
    if (file->empty()) continue;
    Result<std::string> secret =
        ReadSecretFile(field, std::filesystem::path(path).parent_path() / *file);
    if (!secret.ok()) return secret.status().WithContext(path);
    *out = std::move(secret).value();
  }
  if (!spec->replica_secret.empty() && spec->replica_secret == spec->secret) {
    return Bad("replica_secret_file",
               "holds the cluster secret; replicas need a secret of their own")
        .WithContext(path);
  }
  return spec;
}

std::string ClusterSpecToJson(const ClusterSpec& spec) {
  json root;
  root["version"] = 1;
  root["transport"] = spec.transport;
  if (!spec.secret_file.empty()) root["secret_file"] = spec.secret_file;
  if (!spec.replica_secret_file.empty()) root["replica_secret_file"] = spec.replica_secret_file;
  if (!spec.config_store.empty()) root["config_store"] = spec.config_store;
  if (spec.min_in_sync != 0) root["min_in_sync"] = spec.min_in_sync;
  if (spec.insecure) root["insecure"] = true;
  if (!spec.rdma.empty()) {
    json rdma = json::object();
    if (spec.rdma.gid_index >= 0) rdma["gid_index"] = spec.rdma.gid_index;
    if (spec.rdma.traffic_class >= 0) rdma["traffic_class"] = spec.rdma.traffic_class;
    if (spec.rdma.service_level >= 0) rdma["service_level"] = spec.rdma.service_level;
    root["rdma"] = std::move(rdma);
  }
  json tables = json::array();
  for (const TableConfig& t : spec.tables) {
    json j;
    j["id"] = t.id;
    j["name"] = t.name;
    j["kind"] = NameOf(kTableKinds, t.kind);
    j["dim"] = t.dim;
    if (t.kind == TableKind::kDense) j["rows"] = t.dense_rows;
    j["init"] = {{"kind", NameOf(kInitKinds, t.init.kind)},
                 {"value", t.init.value},
                 {"low", t.init.low},
                 {"high", t.init.high},
                 {"mean", t.init.mean},
                 {"stddev", t.init.stddev},
                 {"seed", t.init.seed}};
    j["optimizer"] = {{"kind", NameOf(kOptimizerKinds, t.optimizer.kind)},
                      {"learning_rate", t.optimizer.learning_rate},
                      {"initial_accumulator", t.optimizer.initial_accumulator},
                      {"epsilon", t.optimizer.epsilon}};
    if (t.max_rows != 0) j["max_rows"] = t.max_rows;
    if (t.max_bytes != 0) j["max_bytes"] = t.max_bytes;
    if (t.ttl_seconds != 0) j["ttl_seconds"] = t.ttl_seconds;
    if (t.admit_after_pushes != 0) j["admit_after_pushes"] = t.admit_after_pushes;
    tables.push_back(std::move(j));
  }
  root["tables"] = std::move(tables);
  json shards = json::array();
  for (const ShardSpec& s : spec.shards) {
    json replicas = json::array();
    for (const ReplicaSpec& r : s.replicas) {
      json j = json::object();
      if (!r.rdma.empty()) j["rdma"] = r.rdma;
      if (!r.tcp.empty()) j["tcp"] = r.tcp;
      replicas.push_back(std::move(j));
    }
    shards.push_back({{"replicas", std::move(replicas)}});
  }
  root["shards"] = std::move(shards);
  return root.dump(2);
}

uint32_t ShardOfKey(uint64_t key, uint32_t shard_count) {
  unsigned __int128 product = static_cast<unsigned __int128>(Mix64(key)) * shard_count;
  return static_cast<uint32_t>(product >> 64);
}

std::vector<ShardBatch> SplitByShard(std::span<const uint64_t> keys, uint32_t shard_count) {
  std::vector<int32_t> slot(shard_count, -1);  // shard -> index in `batches`
  std::vector<uint32_t> shard_of(keys.size());
  size_t used = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    shard_of[i] = ShardOfKey(keys[i], shard_count);
    if (slot[shard_of[i]] < 0) slot[shard_of[i]] = 0, ++used;
  }
  std::vector<ShardBatch> batches;
  batches.reserve(used);
  for (uint32_t s = 0; s < shard_count; ++s) {
    if (slot[s] < 0) continue;
    slot[s] = static_cast<int32_t>(batches.size());
    batches.push_back(ShardBatch{s, {}, {}});
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    ShardBatch& b = batches[slot[shard_of[i]]];
    b.keys.push_back(keys[i]);
    b.positions.push_back(static_cast<uint32_t>(i));
  }
  return batches;
}

}  // namespace bx::ps
