// Sends messages to echo_server and checks that each comes back unchanged.
//
//   echo_client rdma://host:7000 [count=1000] [bytes=4096]
//
// Prints the round trips made and their mean time; exits 1 on any error or altered message.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "bx/init.h"
#include "bx/log.h"
#include "bx/transport.h"

namespace {

int Fail(const bx::Status& status) {
  std::fprintf(stderr, "echo_client: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s URL [count] [bytes]\n", argv[0]);
    return 2;
  }
  const long count = argc > 2 ? std::atol(argv[2]) : 1000;
  const size_t bytes = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 4096;
  bx::Result<bx::Url> url = bx::ParseUrl(argv[1]);
  if (!url.ok()) return Fail(url.status());
  bx::SetLogSink(bx::StderrLogSink());  // the library says nothing unless given a sink
  bx::InitOptions init;
  init.rdma = url->scheme == "rdma";
  if (bx::Status s = bx::Init(init); !s.ok()) return Fail(s);

  auto transport = bx::CreateTransport(url->scheme);
  if (!transport.ok()) return Fail(transport.status());
  // No on_message handler: replies queue in the socket for Receive().
  auto socket = (*transport)->Connect(argv[1], {}, std::chrono::seconds(5));
  if (!socket.ok()) return Fail(socket.status());

  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < count; ++i) {
    bx::Result<bx::Buffer> message = bx::Buffer::Allocate(bytes);
    if (!message.ok()) return Fail(message.status());
    std::memset(message->data(), static_cast<int>(i & 0xff), bytes);
    (*socket)->Send(std::move(message).value());

    bx::Result<bx::Buffer> reply = (*socket)->Receive(std::chrono::seconds(5));
    if (!reply.ok()) return Fail(reply.status());
    for (size_t b = 0; b < bytes; ++b) {
      if (reply->size() != bytes || reply->data()[b] != static_cast<std::byte>(i & 0xff)) {
        return Fail(bx::DataLoss("message " + std::to_string(i) + " came back altered"));
      }
    }
  }
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  std::string_view scheme = (*socket)->scheme();
  std::printf("%ld round trips of %zu bytes over %.*s, %.1f us each\n", count, bytes,
              static_cast<int>(scheme.size()), scheme.data(), count > 0 ? us / count : 0.0);
  (*socket)->Close();
  return 0;
}
