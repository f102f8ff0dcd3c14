// Calls rpc_server's "example.Reverse" and checks the answer.
//
//   rpc_client "rdma://127.0.0.1:7000,tcp://127.0.0.1:7001" [text]
//
// The client prefers rdma:// and falls back to tcp:// on the same replica when RDMA fails.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bx/init.h"
#include "bx/log.h"
#include "bx/rpc.h"

namespace {

int Fail(const bx::Status& status) {
  std::fprintf(stderr, "rpc_client: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s REPLICA_ADDRESS [text]\n", argv[0]);
    return 2;
  }
  const std::string text = argc == 3 ? argv[2] : "bexpress";
  bx::Result<bx::rpc::ReplicaAddress> replica = bx::rpc::ReplicaAddress::Parse(argv[1]);
  if (!replica.ok()) return Fail(replica.status());
  bx::SetLogSink(bx::StderrLogSink());  // the library says nothing unless given a sink
  bx::InitOptions init;
  init.rdma = !replica->rdma_url.empty();
  if (bx::Status s = bx::Init(init); !s.ok()) return Fail(s);

  auto client = bx::rpc::Client::Create({*replica});
  if (!client.ok()) return Fail(client.status());
  if (bx::Status s = (*client)->WaitReady(std::chrono::seconds(5)); !s.ok()) return Fail(s);

  auto request = bx::rpc::Message::CopyOf(text);
  if (!request.ok()) return Fail(request.status());
  bx::rpc::CallOptions call;
  call.idempotent = true;  // safe to retry on another connection: it changes nothing
  bx::Result<bx::rpc::Message> response =
      (*client)->Call("example.Reverse", std::move(request).value(), call).get();
  if (!response.ok()) return Fail(response.status());

  std::string expected(text.rbegin(), text.rend());
  if (response->view() != expected) return Fail(bx::DataLoss("wrong answer"));
  std::printf("example.Reverse(\"%s\") = \"%s\"\n", text.c_str(), expected.c_str());
  return 0;
}
