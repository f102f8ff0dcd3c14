// Shard routing (stable, balanced) and the cluster file parser.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "bx/ps/cluster.h"

namespace bx::ps {
namespace {

// These values are part of the on-disk contract: a change re-shards every model.
TEST(ShardOfKey, GoldenValuesAreStable) {
  EXPECT_EQ(ShardOfKey(0, 16), 0u);
  EXPECT_EQ(ShardOfKey(1, 16), 5u);
  EXPECT_EQ(ShardOfKey(42, 16), 10u);
  EXPECT_EQ(ShardOfKey(12345678901234567ull, 300), 141u);
  EXPECT_EQ(ShardOfKey(~0ull, 124), 87u);
  EXPECT_EQ(ShardOfKey(7, 3), 0u);
  EXPECT_EQ(ShardOfKey(99, 1), 0u);
}

TEST(ShardOfKey, SequentialKeysAreBalanced) {
  for (uint32_t shards : {3u, 16u, 124u}) {
    std::vector<uint64_t> count(shards);
    const uint64_t keys = 200000;
    for (uint64_t k = 0; k < keys; ++k) {
      uint32_t s = ShardOfKey(k, shards);
      ASSERT_LT(s, shards);
      ++count[s];
    }
    const double expected = static_cast<double>(keys) / shards;
    for (uint32_t s = 0; s < shards; ++s) {
      // ~5 standard deviations of a binomial count at these sizes.
      EXPECT_NEAR(count[s], expected, 5 * std::sqrt(expected)) << shards << " shards, shard " << s;
    }
  }
}

TEST(SplitByShard, KeepsPositionsAndCoversEveryKey) {
  std::vector<uint64_t> keys(1000);
  std::iota(keys.begin(), keys.end(), 5000);
  keys.push_back(5000);  // a repeated key goes to the same shard twice
  auto batches = SplitByShard(keys, 7);
  size_t total = 0;
  uint32_t last_shard = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    if (b > 0) {
      EXPECT_GT(batches[b].shard, last_shard);
    }
    last_shard = batches[b].shard;
    ASSERT_EQ(batches[b].keys.size(), batches[b].positions.size());
    for (size_t i = 0; i < batches[b].keys.size(); ++i) {
      EXPECT_EQ(keys[batches[b].positions[i]], batches[b].keys[i]);
      EXPECT_EQ(ShardOfKey(batches[b].keys[i], 7), batches[b].shard);
    }
    total += batches[b].keys.size();
  }
  EXPECT_EQ(total, keys.size());
  EXPECT_TRUE(SplitByShard({}, 7).empty());
}

constexpr const char* kExample = R"({
  "version": 1,
  "transport": "tcp",
  "tables": [
    {"id": 1, "name": "user", "kind": "embedding", "dim": 16,
     "init": {"kind": "normal", "mean": 0, "stddev": 0.01, "seed": 7},
     "optimizer": {"kind": "adagrad", "learning_rate": 0.05}},
    {"id": 2, "name": "mlp", "kind": "dense", "dim": 256, "rows": 64}
  ],
  "shards": [
    {"replicas": [{"rdma": "rdma://10.0.0.1:7000", "tcp": "tcp://10.0.0.1:7001"},
                  {"tcp": "tcp://10.0.0.2:7001"}]},
    {"replicas": [{"rdma": "rdma://10.0.0.3:7000"}]}
  ]
})";

TEST(ClusterSpec, ParsesTheDocumentedExample) {
  Result<ClusterSpec> spec = ParseClusterSpec(kExample);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->transport, "tcp");
  ASSERT_EQ(spec->tables.size(), 2u);
  EXPECT_EQ(spec->tables[0].init.kind, InitializerKind::kNormal);
  EXPECT_EQ(spec->tables[0].init.seed, 7u);
  EXPECT_EQ(spec->tables[0].optimizer.kind, OptimizerKind::kAdagrad);
  EXPECT_FLOAT_EQ(spec->tables[0].optimizer.learning_rate, 0.05f);
  EXPECT_EQ(spec->tables[1].kind, TableKind::kDense);
  EXPECT_EQ(spec->tables[1].dense_rows, 64u);
  ASSERT_EQ(spec->shards.size(), 2u);
  EXPECT_EQ(spec->shards[0].replicas[0].rdma, "rdma://10.0.0.1:7000");
  EXPECT_EQ(spec->shards[0].replicas[1].rdma, "");
  EXPECT_EQ(spec->shards[0].replicas[1].tcp, "tcp://10.0.0.2:7001");

  // Writing and reading back gives the same spec.
  Result<ClusterSpec> again = ParseClusterSpec(ClusterSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ClusterSpecToJson(*again), ClusterSpecToJson(*spec));
}

// kExample, made open on purpose ("insecure": true after its version).
std::string OpenExample() {
  std::string text = kExample;
  const std::string version = R"("version": 1,)";
  text.insert(text.find(version) + version.size(), R"( "insecure": true,)");
  return text;
}

TEST(ClusterSpec, LoadsFromAFile) {
  const std::string path = ::testing::TempDir() + "/bx_ps_cluster.json";
  std::ofstream(path) << OpenExample();
  Result<ClusterSpec> spec = LoadClusterFile(path);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->shards.size(), 2u);
  EXPECT_TRUE(spec->insecure);
  Result<ClusterSpec> missing = LoadClusterFile(path + ".absent");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Once a file that names no secret served every method to anyone, silently. Now
// an open cluster is refused unless the file says "insecure": true, and the error says how to
// fix it; a file with both is refused too. Parsing text (a client's in-memory spec) stays free.
TEST(ClusterSpec, AClusterFileWithoutASecretIsRefusedUnlessItSaysInsecure) {
  const std::string path = ::testing::TempDir() + "/bx_ps_open.json";
  std::ofstream(path) << kExample;
  Result<ClusterSpec> open = LoadClusterFile(path);
  ASSERT_FALSE(open.ok()) << "an open cluster by omission was loaded";
  EXPECT_EQ(open.status().code(), StatusCode::kInvalidArgument);
  const std::string message = open.status().message();
  EXPECT_NE(message.find("secret_file"), std::string::npos) << message;
  EXPECT_NE(message.find("\"insecure\": true"), std::string::npos) << message;
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_TRUE(ParseClusterSpec(kExample).ok());

  std::ofstream(path) << OpenExample();
  Result<ClusterSpec> chosen = LoadClusterFile(path);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_TRUE(chosen->insecure);
  Result<ClusterSpec> again = ParseClusterSpec(ClusterSpecToJson(*chosen));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->insecure) << "written back, an open cluster stays open on purpose";

  Result<ClusterSpec> both = ParseClusterSpec(
      R"({"version": 1, "insecure": true, "secret_file": "cluster.secret",
          "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("contradicts secret_file"), std::string::npos)
      << both.status().ToString();
  EXPECT_FALSE(ParseClusterSpec(R"({"version": 1, "insecure": "yes",
                                    "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})")
                   .ok());
}

TEST(ClusterSpec, AddressesThatResolveToOneEndpointAreRefusedNamingBoth) {
  const std::string path = ::testing::TempDir() + "/bx_ps_aliased.json";
  std::ofstream(path) << R"({"version": 1, "shards": [{"replicas": [
      {"tcp": "tcp://127.0.0.1:26021"}, {"tcp": "tcp://localhost:26021"}]}]})";
  ASSERT_TRUE(ParseClusterSpec(R"({"version": 1, "shards": [{"replicas": [
      {"tcp": "tcp://127.0.0.1:26021"}, {"tcp": "tcp://localhost:26021"}]}]})")
                  .ok())
      << "as text the two differ";
  Result<ClusterSpec> aliased = LoadClusterFile(path);
  ASSERT_FALSE(aliased.ok()) << "a replica would be its own backup";
  const std::string message = aliased.status().message();
  EXPECT_NE(message.find("shards[0].replicas[0].tcp"), std::string::npos) << message;
  EXPECT_NE(message.find("shards[0].replicas[1].tcp"), std::string::npos) << message;
  EXPECT_NE(message.find("127.0.0.1:26021"), std::string::npos) << message;
  // Across shards and schemes too (rdma:// listens on its TCP port), and the same text twice is
  // the parser's error already.
  std::ofstream(path) << R"({"version": 1, "shards": [
      {"replicas": [{"rdma": "rdma://localhost:26030"}]},
      {"replicas": [{"tcp": "tcp://127.0.0.1:26030"}]}]})";
  EXPECT_FALSE(LoadClusterFile(path).ok());
  std::ofstream(path) << R"({"version": 1, "insecure": true, "shards": [{"replicas": [
      {"tcp": "tcp://127.0.0.1:26021"}, {"tcp": "tcp://localhost:26022"}]}]})";
  Result<ClusterSpec> distinct = LoadClusterFile(path);
  EXPECT_TRUE(distinct.ok()) << distinct.status().ToString();
}

TEST(ClusterSpec, NamesItsConfigurationStoreAndWritesItBack) {
  Result<ClusterSpec> spec = ParseClusterSpec(
      R"({"version": 1, "config_store": "http://10.0.0.9:2379",
          "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->config_store, "http://10.0.0.9:2379");
  Result<ClusterSpec> again = ParseClusterSpec(ClusterSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->config_store, spec->config_store);

  // Every member of a three-member etcd, as a list or as etcdctl's comma-separated string.
  for (const char* members : {R"(["http://e1:2379", "http://e2:2379", "http://e3:2379"])",
                              R"("http://e1:2379,http://e2:2379,http://e3:2379")"}) {
    Result<ClusterSpec> three =
        ParseClusterSpec(std::string(R"({"version": 1, "config_store": )") + members +
                         R"(, "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})");
    ASSERT_TRUE(three.ok()) << three.status().ToString();
    EXPECT_EQ(three->config_store, "http://e1:2379,http://e2:2379,http://e3:2379");
  }
}

TEST(ClusterSpec, MinInSyncDefaultsByShardSizeAndIsBoundedByIt) {
  // Shard 0 of 3 replicas, shard 1 of one; `field` goes after the version.
  auto parse = [](const std::string& field) {
    return ParseClusterSpec(R"({"version": 1)" + field + R"(,
      "shards": [{"replicas": [{"tcp": "tcp://h:1"}, {"tcp": "tcp://h:2"}, {"tcp": "tcp://h:3"}]},
                 {"replicas": [{"tcp": "tcp://h:4"}]}]})");
  };
  Result<ClusterSpec> spec = parse("");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(MinInSyncOf(*spec, 0), 2u) << "3 replicas: one crash must not lose an ack";
  EXPECT_EQ(MinInSyncOf(*spec, 1), 1u) << "a lone replica is all the shard has";
  // 2 is above the one-replica shard's size: that shard could never acknowledge a push.
  Result<ClusterSpec> too_many = parse(R"(, "min_in_sync": 2)");
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("shards[1] has 1 replicas"), std::string::npos)
      << too_many.status().ToString();
  EXPECT_FALSE(parse(R"(, "min_in_sync": 0)").ok());
  Result<ClusterSpec> one = parse(R"(, "min_in_sync": 1)");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(MinInSyncOf(*one, 0), 1u);
  Result<ClusterSpec> again = ParseClusterSpec(ClusterSpecToJson(*one));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->min_in_sync, 1u);
}

TEST(ClusterSpec, CarriesRdmaAddressingChecksItAndWritesItBack) {
  Result<ClusterSpec> spec = ParseClusterSpec(
      R"({"version": 1, "rdma": {"traffic_class": 98, "service_level": 5},
          "shards": [{"replicas": [{"rdma": "rdma://h:1"}]}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->rdma.traffic_class, 98);
  EXPECT_EQ(spec->rdma.service_level, 5);
  EXPECT_EQ(spec->rdma.gid_index, -1) << "unset: the transport chooses";
  Result<ClusterSpec> again = ParseClusterSpec(ClusterSpecToJson(*spec));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->rdma.traffic_class, 98);
  EXPECT_EQ(again->rdma.gid_index, -1);

  const char* bad[][2] = {
      {R"({"traffic_class": 256})", "rdma.traffic_class"},
      {R"({"service_level": 16})", "rdma.service_level"},
      {R"({"gid_index": -1})", "rdma.gid_index"},
      {R"({"tclass": 106})", "unknown field \"tclass\""},
  };
  for (const auto& [rdma, expect] : bad) {
    Result<ClusterSpec> refused =
        ParseClusterSpec(std::string(R"({"version": 1, "rdma": )") + rdma +
                         R"(, "shards": [{"replicas": [{"rdma": "rdma://h:1"}]}]})");
    ASSERT_FALSE(refused.ok()) << rdma;
    EXPECT_NE(refused.status().message().find(expect), std::string::npos)
        << refused.status().ToString();
  }
}

// The secret file sits next to the cluster file; it must be the owner's alone.
TEST(ClusterSpec, ReadsTheSecretFileAndRefusesOneOthersCanRead) {
  const std::string dir = ::testing::TempDir() + "/bx_ps_secret_test";
  std::filesystem::create_directories(dir);
  const std::string cluster = dir + "/cluster.json";
  const std::string secret = dir + "/cluster.secret";
  std::ofstream(cluster) << R"({"version": 1, "secret_file": "cluster.secret",
                               "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})";
  std::ofstream(secret) << "  s3cret value\n";
  std::filesystem::permissions(
      secret, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  Result<ClusterSpec> spec = LoadClusterFile(cluster);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->secret, "s3cret value");
  EXPECT_EQ(spec->secret_file, "cluster.secret");
  EXPECT_TRUE(spec->config_store.empty());
  // Written back, the file names the secret file, never the secret.
  EXPECT_EQ(ClusterSpecToJson(*spec).find("s3cret"), std::string::npos);
  EXPECT_NE(ClusterSpecToJson(*spec).find("cluster.secret"), std::string::npos);
  // Parsed from text, the secret is not read.
  EXPECT_EQ(ParseClusterSpec(ClusterSpecToJson(*spec))->secret, "");

  std::filesystem::permissions(secret, std::filesystem::perms::group_read,
                               std::filesystem::perm_options::add);
  Result<ClusterSpec> open_to_group = LoadClusterFile(cluster);
  ASSERT_FALSE(open_to_group.ok());
  EXPECT_NE(open_to_group.status().message().find("mode 0640"), std::string::npos)
      << open_to_group.status().ToString();

  std::filesystem::remove(secret);
  Result<ClusterSpec> missing = LoadClusterFile(cluster);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cluster.secret"), std::string::npos);
  std::ofstream(secret) << " \n";
  std::filesystem::permissions(secret, std::filesystem::perms::owner_read);
  Result<ClusterSpec> empty = LoadClusterFile(cluster);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("is empty"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// The replicas' secret is read the same way, needs a cluster secret, and must differ from it.
TEST(ClusterSpec, ReadsTheReplicaSecretFile) {
  const std::string dir = ::testing::TempDir() + "/bx_ps_replica_secret_test";
  std::filesystem::create_directories(dir);
  const std::string cluster = dir + "/cluster.json";
  auto write_secret = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    std::filesystem::permissions(
        dir + "/" + name, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  };
  write_secret("cluster.secret", "cluster");
  write_secret("replica.secret", "replica\n");
  std::ofstream(cluster) << R"({"version": 1, "secret_file": "cluster.secret",
                               "replica_secret_file": "replica.secret",
                               "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})";
  Result<ClusterSpec> spec = LoadClusterFile(cluster);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->secret, "cluster");
  EXPECT_EQ(spec->replica_secret, "replica");
  EXPECT_NE(ClusterSpecToJson(*spec).find("replica.secret"), std::string::npos);

  write_secret("replica.secret", "cluster");
  Result<ClusterSpec> same = LoadClusterFile(cluster);
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.status().message().find("replica_secret_file"), std::string::npos)
      << same.status().ToString();

  Result<ClusterSpec> alone = ParseClusterSpec(
      R"({"version": 1, "replica_secret_file": "replica.secret",
          "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})");
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("needs a secret_file"), std::string::npos)
      << alone.status().ToString();
  std::filesystem::remove_all(dir);
}

TEST(ClusterSpec, ErrorsNameWhatIsWrong) {
  struct Case {
    const char* json;
    const char* expect;  // substring of the error
  };
  const Case cases[] = {
      {"{", "not valid JSON"},
      {R"({"version": 2, "shards": []})", "version"},
      {R"({"version": 1})", "missing \"shards\""},
      {R"({"version": 1, "shards": []})", "shards"},
      {R"({"version": 1, "shards": [{"replicas": []}]})", "shards[0].replicas"},
      {R"({"version": 1, "shards": [{"replicas": [{}]}]})", "shards[0].replicas[0]"},
      {R"({"version": 1, "shards": [{"replicas": [{"rdma": "tcp://h:1"}]}]})",
       "shards[0].replicas[0].rdma"},
      {R"({"version": 1, "shards": [{"replicas": [{"tcp": 5}]}]})", "expected a string"},
      {R"({"version": 1, "bogus": 1, "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "unknown field \"bogus\""},
      {R"({"version": 1, "transport": "udp", "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "transport"},
      {R"({"version": 1, "tables": [{"id": 1}], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "tables[0]: missing \"dim\""},
      {R"({"version": 1, "tables": [{"id": 1, "dim": 0}], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "tables[0].dim"},
      {R"({"version": 1, "tables": [{"id": -1, "dim": 4}], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "tables[0].id"},
      {R"({"version": 1, "tables": [{"id": 1, "dim": 4, "kind": "dense"}], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "tables[0].rows"},
      {R"({"version": 1, "tables": [{"id": 1, "dim": 4}, {"id": 1, "dim": 4}], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "duplicate table id"},
      {R"({"version": 1, "tables": [{"id": 1, "name": "user", "dim": 4}, {"id": 2, "name": "user", "dim": 4}], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "tables[1].name: duplicate table name \"user\""},
      {R"({"version": 1, "tables": [{"id": 1, "dim": 4, "init": {"kind": "gauss"}}], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "tables[0].init.kind"},
      {R"({"version": 1, "tables": [{"id": 1, "dim": 4, "optimizer": {"learning_rate": 0}}], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "learning_rate"},
      {R"({"version": 1, "shards": [{"replicas": [{"tcp": "tcp://h:70000"}]}]})",
       "shards[0].replicas[0].tcp"},
      {R"({"version": 1, "shards": [{"replicas": [{"tcp": "tcp://h:0"}]}]})",
       "needs a port from 1 to 65535"},
      {R"({"version": 1, "shards": [{"replicas": [{"tcp": "tcp://:7000"}]}]})",
       "shards[0].replicas[0].tcp"},
      // One address twice: the replica would be its own backup.
      {R"({"version": 1, "shards": [{"replicas": [{"tcp": "tcp://h:1"}, {"tcp": "tcp://h:1"}]}]})",
       "shards[0].replicas[1].tcp: \"tcp://h:1\" uses the host and port of "
       "shards[0].replicas[0].tcp"},
      // rdma:// listens on a TCP port too, so another scheme on the same port collides.
      {R"({"version": 1, "shards": [{"replicas": [{"rdma": "rdma://h:1"}]}, {"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "shards[1].replicas[0].tcp"},
      {R"({"version": 1, "secret_file": "", "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "secret_file"},
      {R"({"version": 1, "config_store": "https://e:2379", "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "config_store"},
      {R"({"version": 1, "config_store": 7, "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "config_store"},
      {R"({"version": 1, "config_store": [], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "config_store"},
      {R"({"version": 1, "config_store": ["http://e:1", 7], "shards": [{"replicas": [{"tcp": "tcp://h:1"}]}]})",
       "config_store"},
  };
  for (const Case& c : cases) {
    Result<ClusterSpec> spec = ParseClusterSpec(c.json);
    ASSERT_FALSE(spec.ok()) << c.json;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.expect), std::string::npos)
        << "error \"" << spec.status().message() << "\" should mention \"" << c.expect << "\"";
  }
}

}  // namespace
}  // namespace bx::ps
