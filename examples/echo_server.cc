// A message echo server over bexpress: every message a client sends comes back to it unchanged.
//
//   echo_server rdma://0.0.0.0:7000     (or tcp://..., port 0 for any free port)
//
// It prints the url it listens on, then serves until SIGINT or SIGTERM.
#include <cstdio>
#include <memory>

#include "bx/init.h"
#include "bx/log.h"
#include "bx/transport.h"
#include "wait_for_signal.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s rdma://host:port | tcp://host:port\n", argv[0]);
    return 2;
  }
  bx::Result<bx::Url> url = bx::ParseUrl(argv[1]);
  if (!url.ok()) {
    std::fprintf(stderr, "%s\n", url.status().ToString().c_str());
    return 2;
  }
  // A TCP-only server needs no RDMA device.
  bx::SetLogSink(bx::StderrLogSink());  // the library says nothing unless given a sink
  bx::InitOptions init;
  init.rdma = url->scheme == "rdma";
  if (bx::Status s = bx::Init(init); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  bx::Result<std::unique_ptr<bx::Transport>> transport = bx::CreateTransport(url->scheme);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }

  // Handlers run on the transport's I/O thread: sending the received buffer back is non-blocking
  // and copies nothing (the buffer goes back out as it came in).
  auto on_accept = [](const std::shared_ptr<bx::Socket>&) {
    bx::SocketHandlers handlers;
    handlers.on_message = [](bx::Socket& socket, bx::Buffer message) {
      socket.Send(std::move(message));
    };
    return handlers;
  };
  bx::Result<std::unique_ptr<bx::Listener>> listener =
      (*transport)->Listen(argv[1], std::move(on_accept));
  if (!listener.ok()) {
    std::fprintf(stderr, "%s\n", listener.status().ToString().c_str());
    return 1;
  }
  std::printf("listening on %s\n", (*listener)->url().c_str());
  std::fflush(stdout);

  WaitForSigintOrSigterm();
  return 0;
}
