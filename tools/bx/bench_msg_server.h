// The far end of `bx bench msg`: a listener whose sockets echo or count, each told which by the
// first message its client sends. The same server runs inside the benchmark's process (the
// default) or in a process of its own (`bx bench msg --serve URL`, and `--connect URL` on the
// client), where both ends pay for crossing between processes as perftest's and UCX's do.
//
// Protocol, one message each, text: the client opens with "echo" or "sink N"; the server answers
// "ready". An echo socket then returns every message as it came (the same buffer, no copy); a
// sink socket counts N messages and answers "done CPU_NS HARDWARE_NS": the CPU this process and
// the simnic's hardware threads in it used since its "ready", so that a client in another process
// can count the receiver's host CPU with its own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "bx/buffer.h"
#include "bx/status.h"
#include "bx/transport.h"

namespace bx::tools {

// The server's answers, parsed by the client.
struct SinkDone {
  uint64_t cpu_ns = 0;
  uint64_t hardware_ns = 0;
};
// A message's bytes as text (the protocol's messages are short).
std::string_view MessageText(const Buffer& message);
Result<Buffer> TextMessage(std::string_view text);
// "done CPU_NS HARDWARE_NS" -> its figures; InvalidArgument for anything else.
Result<SinkDone> ParseSinkDone(std::string_view text);

class BenchMsgServer {
 public:
  // A transport of `url`'s scheme with `options`, listening on `url` (port 0: any).
  static Result<std::unique_ptr<BenchMsgServer>> Start(const std::string& url,
                                                       const TransportOptions& options);
  ~BenchMsgServer();

  std::string url() const { return listener_->url(); }
  Transport& transport() { return *transport_; }
  // The receiver-side counters of the last sink socket to finish (empty before one has).
  std::map<std::string, uint64_t> last_sink_counters() const;

 private:
  struct Connection;
  BenchMsgServer() = default;
  SocketHandlers Accept();
  void OnMessage(Connection& connection, Socket& socket, Buffer message);

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> last_sink_counters_;  // guarded by mutex_
};

}  // namespace bx::tools
