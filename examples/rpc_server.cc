// An RPC service over bexpress: "example.Reverse" answers with its request reversed.
//
//   rpc_server 127.0.0.1      listens on rdma:// and tcp:// (any free ports) on that address
//   rpc_server 127.0.0.1 tcp  tcp:// only (no RDMA device needed)
//
// Prints the replica address clients take ("rdma://...,tcp://..."), serves until SIGINT/SIGTERM.
#include <algorithm>
#include <cstdio>
#include <string>

#include "bx/init.h"
#include "bx/log.h"
#include "bx/rpc.h"
#include "wait_for_signal.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s HOST [tcp]\n", argv[0]);
    return 2;
  }
  const std::string host = argv[1];
  const bool tcp_only = argc == 3 && std::string(argv[2]) == "tcp";
  bx::SetLogSink(bx::StderrLogSink());  // the library says nothing unless given a sink
  bx::InitOptions init;
  init.rdma = !tcp_only;
  if (bx::Status s = bx::Init(init); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }

  auto server = bx::rpc::Server::Create();
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  // With worker_threads = 0 the handler runs on an I/O thread: it must not block, and it does not.
  bx::Status added = (*server)->AddMethod("example.Reverse", [](bx::rpc::ServerCall call) {
    std::string_view request = call.request().view();
    bx::Result<bx::rpc::Message> response = bx::rpc::Message::Allocate(request.size());
    if (!response.ok()) return call.Fail(response.status());
    std::reverse_copy(request.begin(), request.end(), reinterpret_cast<char*>(response->data()));
    call.Respond(std::move(response).value());
  });
  bx::Status started =
      tcp_only ? (*server)->Start({"tcp://" + host + ":0"}) : (*server)->StartOnAnyPorts(host);
  if (!added.ok() || !started.ok()) {
    std::fprintf(stderr, "%s\n", (added.ok() ? started : added).ToString().c_str());
    return 1;
  }
  std::printf("serving at %s\n", (*server)->address().ToString().c_str());
  std::fflush(stdout);

  WaitForSigintOrSigterm();
  return 0;
}
