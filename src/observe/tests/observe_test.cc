// bx_observe over real transports on the simnic: /metrics scraped over HTTP during a transfer
// shows the engine, RPC and parameter-server counters moving, and the text is well formed.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "alloc/testing/test_memory.h"
#include "alloc/verbs_registrar.h"
#include "bx/bemalloc.h"
#include "bx/buffer.h"
#include "bx/observe.h"
#include "metrics/http_request.h"
#include "metrics/text_format.h"
#include "ps/service/ps_service.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport_registry.h"
#include "verbs/verbs.h"

namespace bx::observe {
namespace {

using namespace std::chrono_literals;
using metrics::ParsedText;

constexpr auto kTimeout = 5s;

// The sum of every sample of `name` whose labels include all of `match`.
double Sum(const ParsedText& text, const std::string& name, const Labels& match = {}) {
  double sum = 0;
  for (const auto& s : text.samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& m : match)
      all = all && std::find(s.labels.begin(), s.labels.end(), m) != s.labels.end();
    if (all) sum += s.value;
  }
  return sum;
}

bool Has(const ParsedText& text, const std::string& name, const Labels& match = {}) {
  for (const auto& s : text.samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& m : match)
      all = all && std::find(s.labels.begin(), s.labels.end(), m) != s.labels.end();
    if (all) return true;
  }
  return false;
}

// Well-formed exposition: nothing skipped, valid names, every sample's family has TYPE and
// HELP lines before it, counters end in _total (or are a summary's _count/_sum), no duplicate
// series.
void ExpectWellFormed(const std::string& body) {
  size_t skipped = 0;
  ParsedText text = metrics::ParseText(body, &skipped);
  EXPECT_EQ(skipped, 0u);
  ASSERT_FALSE(text.samples.empty());
  std::set<std::string> series;
  for (const auto& s : text.samples) {
    EXPECT_TRUE(metrics::IsValidMetricName(s.name)) << s.name;
    for (const auto& [key, value] : s.labels) EXPECT_TRUE(metrics::IsValidLabelName(key)) << key;
    auto type = text.types.find(s.name);
    ASSERT_NE(type, text.types.end()) << "no TYPE for " << s.name;
    EXPECT_TRUE(text.help.contains(s.name)) << "no HELP for " << s.name;
    if (type->second == "counter") {
      EXPECT_TRUE(s.name.ends_with("_total") || s.name.ends_with("_count") ||
                  s.name.ends_with("_sum"))
          << s.name;
    } else {
      EXPECT_EQ(type->second, "gauge") << s.name;
    }
    EXPECT_TRUE(series.insert(s.name + metrics::FormatLabels(s.labels)).second)
        << "duplicate series " << s.name << metrics::FormatLabels(s.labels);
  }
  // TYPE precedes the family's samples.
  for (const auto& [name, type] : text.types) {
    size_t type_line = body.find("# TYPE " + name + " " + type + "\n");
    size_t help_line = body.find("# HELP " + name + " ");
    size_t first = body.find("\n" + name);
    ASSERT_NE(type_line, std::string::npos) << name;
    EXPECT_LT(help_line, type_line) << name;
    EXPECT_LT(type_line, first) << name;
  }
}

std::unique_ptr<Transport> MakeRdma() {
  auto t = rdma::CreateRdmaTransport(TransportOptions{});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

Buffer Message(size_t size) {
  auto b = Buffer::Allocate(size);
  EXPECT_TRUE(b.ok());
  std::memset(b->data(), 0x5a, size);
  return std::move(b).value();
}

TEST(ObserveTest, ScrapeDuringTransferSeesEngineAndRpcCountersMove) {
  metrics::Registry registry;
  auto server_transport = MakeRdma();
  auto client_transport = MakeRdma();
  ASSERT_TRUE(server_transport && client_transport);

  // A raw socket pair; the server side only counts what arrives.
  std::atomic<uint64_t> received{0};
  auto listener = server_transport->Listen("rdma://127.0.0.1:0", [&](const auto&) {
    SocketHandlers h;
    h.on_message = [&](Socket&, Buffer) { received.fetch_add(1); };
    return h;
  });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto socket = client_transport->Connect((*listener)->url(), {}, kTimeout);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();

  // An RPC server (its own transports) and a client over our client transport.
  rpc::ServerOptions server_options;
  server_options.log = [](std::string_view) {};
  auto rpc_server = rpc::Server::Create(server_options);
  ASSERT_TRUE(rpc_server.ok());
  ASSERT_TRUE((*rpc_server)
                  ->AddMethod("test.Echo",
                              [](rpc::ServerCall call) {
                                auto reply = rpc::Message::CopyOf(call.request().view());
                                call.Respond(std::move(reply).value());
                              })
                  .ok());
  ASSERT_TRUE((*rpc_server)->StartOnAnyPorts().ok());
  rpc::ClientOptions client_options;
  client_options.log = [](std::string_view) {};
  client_options.rdma_transport = client_transport.get();
  auto rpc_client = rpc::Client::Create({(*rpc_server)->address()}, client_options);
  ASSERT_TRUE(rpc_client.ok());
  ASSERT_TRUE((*rpc_client)->WaitReady(kTimeout).ok());

  auto exported_client = ExportRdmaTransport(*client_transport, {{"role", "client"}}, registry);
  ASSERT_TRUE(exported_client.ok()) << exported_client.status().ToString();
  auto exported_server = ExportRdmaTransport(*server_transport, {{"role", "server"}}, registry);
  ASSERT_TRUE(exported_server.ok());
  CollectorHandle socket_handle = ExportSocket(**socket, {{"role", "client"}}, registry);
  CollectorHandle client_handle = ExportRpcClient(**rpc_client, {{"service", "echo"}}, registry);
  CollectorHandle server_handle = ExportRpcServer(**rpc_server, {{"service", "echo"}}, registry);

  auto endpoint = metrics::StartHttpServer(metrics::HttpServerOptions{}, registry);  // port 0
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  const std::string url = "http://127.0.0.1:" + std::to_string((*endpoint)->port()) + "/metrics";

  // The transfer: eager (1 KiB) and rendezvous (256 KiB: several fragments) messages, at most 16
  // in flight, and echo calls, until stopped.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> send_errors{0}, call_errors{0};
  std::thread sender([&] {
    std::mutex mu;
    std::condition_variable cv;
    int in_flight = 0;
    for (uint64_t i = 0; !stop.load(); ++i) {
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return in_flight < 16; });
        ++in_flight;
      }
      (*socket)->Send(Message(i % 2 ? 256 << 10 : 1024), [&](const Status& s) {
        if (!s.ok()) send_errors.fetch_add(1);
        std::lock_guard lock(mu);
        --in_flight;
        cv.notify_all();
      });
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return in_flight == 0; });
  });
  std::thread caller([&] {
    while (!stop.load()) {
      auto request = rpc::Message::CopyOf("ping");
      auto reply = (*rpc_client)->Call("test.Echo", std::move(request).value()).get();
      if (!reply.ok()) call_errors.fetch_add(1);
    }
  });

  const Labels client{{"role", "client"}}, server{{"role", "server"}};
  // The client's engine counters that the first scrape must already show above zero.
  const std::vector<std::string> engine_counters = {
      "bx_engine_messages_sent_total", "bx_engine_bytes_sent_total", "bx_engine_fragments_total",
      "bx_engine_rendezvous_exchanges_total", "bx_engine_eager_sent_total"};
  // Every counter that must move between the two scrapes, with the labels it is summed over.
  std::vector<std::pair<std::string, Labels>> moving;
  for (const std::string& name : engine_counters) moving.emplace_back(name, client);
  moving.emplace_back("bx_engine_messages_received_total", server);
  moving.emplace_back("bx_socket_messages_sent_total", client);
  for (const char* name :
       {"bx_rpc_client_calls_total", "bx_rpc_client_calls_ok_total", "bx_rpc_client_attempts_total",
        "bx_rpc_server_requests_total", "bx_rpc_server_executed_total"}) {
    moving.emplace_back(name, Labels{});
  }
  moving.emplace_back("bx_rpc_client_call_latency_seconds_count", Labels{{"method", "test.Echo"}});
  auto first_ready = [&](const ParsedText& a) {
    for (const std::string& name : engine_counters) {
      if (Sum(a, name, client) <= 0) return false;
    }
    return true;
  };
  auto all_moved = [&](const ParsedText& a, const ParsedText& b) {
    for (const auto& [name, labels] : moving) {
      if (Sum(b, name, labels) <= Sum(a, name, labels)) return false;
    }
    return true;
  };

  // Scrape until the transfer shows in the counters, then again until every one has moved.
  // No assertion may return before the threads are joined: the loops only collect.
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  auto first = metrics::HttpGet(url, kTimeout);
  while (first.ok() && !first_ready(metrics::ParseText(*first)) &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(5ms);
    first = metrics::HttpGet(url, kTimeout);
  }
  Result<std::string> second = first;
  if (first.ok()) {
    const ParsedText a = metrics::ParseText(*first);
    do {
      std::this_thread::sleep_for(5ms);
      second = metrics::HttpGet(url, kTimeout);
    } while (second.ok() && !all_moved(a, metrics::ParseText(*second)) &&
             std::chrono::steady_clock::now() < give_up);
  }
  stop.store(true);
  sender.join();
  caller.join();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(send_errors.load(), 0u);
  EXPECT_EQ(call_errors.load(), 0u);

  ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(*first));
  ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(*second));
  ParsedText a = metrics::ParseText(*first), b = metrics::ParseText(*second);
  for (const std::string& name : engine_counters) EXPECT_GT(Sum(a, name, client), 0) << name;
  for (const auto& [name, labels] : moving) {
    EXPECT_GT(Sum(b, name, labels), Sum(a, name, labels)) << name;
  }
  EXPECT_EQ(Sum(b, "bx_engine_rnr_events_total"), 0);
  // Level values are gauges: the client transport has the raw socket's engine and the RPC
  // client's (two destinations), each with its socket(s).
  EXPECT_EQ(b.types["bx_engine_sockets_on_engine"], "gauge");
  EXPECT_EQ(b.types["bx_engine_window_bytes"], "gauge");
  EXPECT_GE(Sum(b, "bx_rdma_engines", client), 2);
  EXPECT_GE(Sum(b, "bx_engine_sockets_on_engine", client), 2);
  EXPECT_GT(Sum(b, "bx_engine_window_bytes", client), 0);
  EXPECT_TRUE(Has(
      b, "bx_engine_messages_sent_total",
      {{"role", "client"}, {"side", "initiator"}, {"engine", "0"}, {"peer", (*listener)->url()}}));
  EXPECT_TRUE(Has(b, "bx_rdma_thread_domains", client));

  // RPC: calls and requests moved (above); latency quantiles per method; no errors but the series
  // exist.
  EXPECT_TRUE(Has(b, "bx_rpc_client_errors_total", {{"code", "DEADLINE_EXCEEDED"}}));
  EXPECT_EQ(Sum(b, "bx_rpc_client_errors_total"), 0);
  EXPECT_EQ(Sum(b, "bx_rpc_fallbacks_to_tcp_total"), 0);
  const Labels echo_p99{{"method", "test.Echo"}, {"quantile", "0.99"}};
  EXPECT_GT(Sum(b, "bx_rpc_client_call_latency_seconds", echo_p99), 0);
  EXPECT_LT(Sum(b, "bx_rpc_client_call_latency_seconds", echo_p99), 1);
  EXPECT_GT(Sum(b, "bx_rpc_server_handler_latency_seconds_count", {{"method", "test.Echo"}}), 0);
  EXPECT_EQ(Sum(b, "bx_rpc_client_replica_state", {{"state", "up"}}), 1);

  // Handles unregister: once they are gone, the series are too.
  exported_client = CollectorHandle();
  exported_server = CollectorHandle();
  socket_handle.Reset();
  client_handle.Reset();
  server_handle.Reset();
  std::string after = registry.ExposeText();
  EXPECT_EQ(after.find("bx_engine_"), std::string::npos);
  EXPECT_EQ(after.find("bx_rpc_"), std::string::npos);
  (*rpc_client).reset();
  (*socket)->Close();
}

TEST(ObserveTest, ExportRdmaTransportRefusesTcp) {
  auto tcp = transport::CreateTransport("tcp", {});
  ASSERT_TRUE(tcp.ok());
  metrics::Registry registry;
  auto handle = ExportRdmaTransport(**tcp, {}, registry);
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), StatusCode::kInvalidArgument);
}

TEST(ObserveTest, ParameterServerCountersMove) {
  ps::TableConfig table;
  table.id = 1;
  table.name = "emb";
  table.dim = 4;
  ps::PsServerOptions options;
  options.rpc.log = [](std::string_view) {};
  auto server = ps::PsServer::Create({table}, options);
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->Start({"tcp://127.0.0.1:0"}).ok());
  ASSERT_TRUE((*server)->BecomePrimary(1, {}).ok());
  ps::ClusterSpec spec;
  spec.transport = "tcp";
  spec.tables = {table};
  spec.shards.push_back({{{"", (*server)->address().tcp_url}}});
  ps::PsClientOptions client_options;
  client_options.transport = "tcp";
  client_options.rpc.log = [](std::string_view) {};
  auto client = ps::PsClient::Create(spec, client_options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();

  metrics::Registry registry;
  Exports exports;
  exports.Add(ExportPsServer(**server, {{"shard", "0"}, {"replica", "0"}}, registry));
  exports.Add(ExportPsClient(**client, {{"client", "test"}}, registry));
  ParsedText a = metrics::ParseText(registry.ExposeText());
  std::vector<uint64_t> keys{1, 2, 3};
  std::vector<float> gradients(keys.size() * table.dim, 1.0f);
  ASSERT_TRUE((*client)->Push(1, table.dim, keys, gradients, kTimeout).ok());
  ASSERT_TRUE((*client)->Fetch(1, keys, kTimeout).ok());
  std::string text = registry.ExposeText();
  ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(text));
  ParsedText b = metrics::ParseText(text);
  EXPECT_EQ(Sum(b, "bx_ps_server_fetches_total") - Sum(a, "bx_ps_server_fetches_total"), 1);
  EXPECT_EQ(Sum(b, "bx_ps_server_pushes_acked_total"), 1);
  EXPECT_EQ(Sum(b, "bx_ps_replica_role", {{"role", "primary"}}), 1);
  EXPECT_EQ(Sum(b, "bx_ps_replica_role", {{"role", "backup"}}), 0);
  EXPECT_EQ(Sum(b, "bx_ps_replica_epoch"), 1);
  EXPECT_EQ(Sum(b, "bx_ps_replica_lsn"), 1);
  EXPECT_GE(Sum(b, "bx_rpc_server_requests_total", {{"shard", "0"}}), 2);
  EXPECT_GE(Sum(b, "bx_rpc_client_calls_ok_total", {{"client", "test"}}), 2);
  EXPECT_FALSE(Has(b, "bx_rpc_client_replica_state"));  // not for a PsClient
  EXPECT_EQ(exports.size(), 2u);
  exports.Clear();
  EXPECT_EQ(registry.ExposeText(), "");
}

// Registered bytes per NIC: the pool's own counters, labelled with the device it registers on.
TEST(ObserveTest, RegisteredMemoryIsExportedPerDevice) {
  Registry registry;
  CollectorHandle handle = ExportRegisteredMemory({{"role", "test"}}, registry);
  Result<Buffer> held = Buffer::Allocate(1 << 20);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::string text = registry.ExposeText();
  ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(text));
  ParsedText parsed = metrics::ParseText(text);
  const std::string device = bemalloc::RegisteredDevice()->name();
  EXPECT_EQ(Sum(parsed, "bx_bemalloc_registered_bytes", {{"device", device}}),
            double(bemalloc::GetCounters().registered_bytes));
  EXPECT_GE(Sum(parsed, "bx_bemalloc_registered_bytes", {{"device", device}}), double(1 << 20));
  EXPECT_GE(Sum(parsed, "bx_bemalloc_registrations_total", {{"role", "test"}}), 1);
  EXPECT_TRUE(Has(parsed, "bx_bemalloc_budget_refusals_total"));
  EXPECT_TRUE(Has(parsed, "bx_bemalloc_budget_bytes"));
}

}  // namespace
}  // namespace bx::observe

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  bx::test_support::InitTestMemory();
  bx::tcp::RegisterTcpTransport();
  bx::rdma::RegisterRdmaTransport();
  return RUN_ALL_TESTS();
}
