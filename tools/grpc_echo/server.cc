// grpc_echo_server [port]: a synchronous gRPC unary echo server on 127.0.0.1. Prints the bound port
// on stdout, then serves until stdin reaches end of file (the benchmark that started it is gone).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "echo.grpc.pb.h"

class EchoService final : public bxbench::Echo::Service {
  grpc::Status Echo(grpc::ServerContext*, const bxbench::EchoMessage* request,
                    bxbench::EchoMessage* reply) override {
    reply->set_payload(request->payload());
    return grpc::Status::OK;
  }
};

int main(int argc, char** argv) {
  int port = argc > 1 ? std::atoi(argv[1]) : 0;
  EchoService service;
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                           &bound);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound == 0) {
    std::fprintf(stderr, "grpc_echo_server: cannot listen\n");
    return 1;
  }
  std::printf("%d\n", bound);
  std::fflush(stdout);
  char byte;
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  server->Shutdown();
  return 0;
}
