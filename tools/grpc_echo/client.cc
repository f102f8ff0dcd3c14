// grpc_echo_client <port> <size> <outstanding> <calls>: keeps <outstanding> unary echo calls in
// flight from one thread through a completion queue (the asynchronous API, as bexpress RPC's
// callbacks are), and prints one JSON object: calls per second, p50 and p99 latency in us.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "echo.grpc.pb.h"

using Clock = std::chrono::steady_clock;

struct PendingCall {
  grpc::ClientContext context;
  bxbench::EchoMessage reply;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<bxbench::EchoMessage>> reader;
  Clock::time_point start;
};

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: grpc_echo_client port size outstanding calls\n");
    return 2;
  }
  const std::string target = std::string("127.0.0.1:") + argv[1];
  const size_t size = std::strtoul(argv[2], nullptr, 10);
  const int outstanding = std::atoi(argv[3]);
  const int calls = std::atoi(argv[4]);
  const int warmup = std::max(100, calls / 10);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  auto stub = bxbench::Echo::NewStub(channel);
  bxbench::EchoMessage request;
  request.set_payload(std::string(size, 'x'));
  grpc::CompletionQueue queue;

  int started = 0;
  int finished = 0;
  int failed = 0;
  std::vector<double> latency_us;
  latency_us.reserve(calls);
  Clock::time_point measure_start;
  auto start_one = [&] {
    auto* call = new PendingCall;
    call->start = Clock::now();
    call->reader = stub->AsyncEcho(&call->context, request, &queue);
    call->reader->Finish(&call->reply, &call->status, call);
    ++started;
  };
  const int total = warmup + calls;
  for (int i = 0; i < outstanding && started < total; ++i) start_one();
  void* tag;
  bool ok;
  while (finished < total && queue.Next(&tag, &ok)) {
    auto* call = static_cast<PendingCall*>(tag);
    ++finished;
    if (!ok || !call->status.ok()) ++failed;
    if (finished == warmup) measure_start = Clock::now();
    if (finished > warmup) {
      latency_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - call->start).count());
    }
    delete call;
    if (started < total) start_one();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - measure_start).count();
  std::sort(latency_us.begin(), latency_us.end());
  auto percentile = [&](double f) {
    return latency_us.empty()
               ? 0.0
               : latency_us[std::min(latency_us.size() - 1, size_t(f * latency_us.size()))];
  };
  std::printf("{\"calls_per_sec\": %.1f, \"p50_us\": %.2f, \"p99_us\": %.2f, \"failed\": %d}\n",
              latency_us.size() / seconds, percentile(0.50), percentile(0.99), failed);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return failed == 0 ? 0 : 1;
}
