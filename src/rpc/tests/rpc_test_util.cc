#include "rpc/tests/rpc_test_util.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "alloc/testing/test_memory.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "verbs/verbs.h"

namespace bx::rpc::testing {

namespace {

verbs::Device* g_device = nullptr;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "rpc test set-up: %s\n", what.c_str());
  std::exit(2);
}

const verbs::Library::SimControl& Sim() {
  if (g_device == nullptr || g_device->lib().sim().vanish == nullptr) {
    Die("the simnic's fault injection is not available");
  }
  return g_device->lib().sim();
}

}  // namespace

void InitProcess() {
  g_device = &test_support::InitTestMemory();
  tcp::RegisterTcpTransport();
  rdma::RegisterRdmaTransport();
}

void VanishDevice() {
  if (int err = Sim().vanish(g_device->context()); err != 0) Die("bxsim_vanish failed");
}

void SetDeviceLink(bool up) {
  if (int err = Sim().set_link(g_device->context(), up ? 1 : 0); err != 0) {
    Die("bxsim_set_link failed");
  }
}

Message Text(std::string_view text) {
  Result<Message> message = Message::CopyOf(text);
  if (!message.ok()) Die(message.status().ToString());
  return std::move(message).value();
}

std::string TextOf(const Result<Message>& result) {
  return result.ok() ? std::string(result->view()) : "error: " + result.status().ToString();
}

Status TestService::Register(Server& server) {
  BX_RETURN_IF_ERROR(server.AddMethod("echo", [](ServerCall call) {
    Message request = std::move(call.request());
    call.Respond(std::move(request));  // the request buffer goes back: no copy
  }));
  BX_RETURN_IF_ERROR(
      server.AddMethod("where", [](ServerCall call) { call.Respond(Text(call.transport())); }));
  BX_RETURN_IF_ERROR(server.AddMethod("count", [this](ServerCall call) {
    call.Respond(Text(std::to_string(executions.fetch_add(1) + 1)));
  }));
  BX_RETURN_IF_ERROR(server.AddMethod("executions", [this](ServerCall call) {
    call.Respond(Text(std::to_string(executions.load())));
  }));
  BX_RETURN_IF_ERROR(server.AddMethod("sleep", [](ServerCall call) {
    int ms = std::atoi(std::string(call.request().view()).c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    call.Respond(Text("slept"));
  }));
  BX_RETURN_IF_ERROR(server.AddMethod("hold", [this, gate = gate](ServerCall call) {
    executions.fetch_add(1);
    if (held.fetch_add(1) == 0) gate->Wait();
    call.Respond(Text(call.transport()));
  }));
  BX_RETURN_IF_ERROR(server.AddMethod(
      "fail", [](ServerCall call) { call.Fail(InvalidArgument("asked to fail")); }));
  return Status::Ok();
}

std::unique_ptr<TestServer> StartTestServer(int worker_threads, const std::string& schemes) {
  auto test_server = std::make_unique<TestServer>();
  ServerOptions options;
  options.worker_threads = worker_threads;
  options.log = [](std::string_view) {};
  auto server = Server::Create(options);
  if (!server.ok()) Die(server.status().ToString());
  test_server->server = std::move(server).value();
  Status status = test_server->service->Register(*test_server->server);
  if (!status.ok()) Die(status.ToString());
  std::vector<std::string> urls;
  if (schemes.find("rdma") != std::string::npos) urls.push_back("rdma://127.0.0.1:0");
  if (schemes.find("tcp") != std::string::npos) urls.push_back("tcp://127.0.0.1:0");
  status = test_server->server->Start(urls);
  if (!status.ok()) Die(status.ToString());
  test_server->address = test_server->server->address();
  return test_server;
}

ClientOptions FastClientOptions() {
  ClientOptions options;
  // Generous enough that a thread stalled for a while on a loaded machine (or in a sanitizer
  // build) neither fails a connection set-up nor has its replica declared silent, which would
  // fail calls that are not idempotent. Tests that rely on heartbeats to notice a silent peer set
  // their own, shorter values.
  options.connect_timeout = std::chrono::milliseconds(5000);
  options.heartbeat_interval = std::chrono::milliseconds(50);
  options.heartbeat_timeout = std::chrono::milliseconds(1000);
  options.probe_interval = std::chrono::milliseconds(100);
  options.rdma_retry_interval = std::chrono::milliseconds(200);
  options.seed = 42;
  options.log = [](std::string_view line) {
    std::fprintf(stderr, "[rpc] %.*s\n", static_cast<int>(line.size()), line.data());
  };
  return options;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

}  // namespace bx::rpc::testing
