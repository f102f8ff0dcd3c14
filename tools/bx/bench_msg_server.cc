#include "bench_msg_server.h"

#include <charconv>
#include <cstring>
#include <optional>

#include <fmt/core.h>

#include "bench_common.h"

namespace bx::tools {

std::string_view MessageText(const Buffer& message) {
  return {reinterpret_cast<const char*>(message.data()), message.size()};
}

Result<Buffer> TextMessage(std::string_view text) {
  BX_ASSIGN_OR_RETURN(Buffer message, Buffer::Allocate(text.size()));
  std::memcpy(message.data(), text.data(), text.size());
  return message;
}

namespace {

// The number after `prefix` in `text` ("sink 2000" with "sink "), or nullopt.
std::optional<uint64_t> NumberAfter(std::string_view text, std::string_view prefix) {
  if (text.substr(0, prefix.size()) != prefix) return std::nullopt;
  text.remove_prefix(prefix.size());
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

Result<SinkDone> ParseSinkDone(std::string_view text) {
  const size_t space = text.rfind(' ');
  if (space != std::string_view::npos) {
    auto cpu = NumberAfter(text.substr(0, space), "done ");
    auto hardware = NumberAfter(text.substr(space), " ");
    if (cpu && hardware) return SinkDone{*cpu, *hardware};
  }
  return InvalidArgument(fmt::format("bench msg: expected \"done CPU_NS HARDWARE_NS\", got \"{}\"",
                                     text.substr(0, 64)));
}

// One accepted socket's state; only its I/O thread touches it (messages arrive in order there).
struct BenchMsgServer::Connection {
  enum class Mode { kOpening, kEcho, kSink, kClosed } mode = Mode::kOpening;
  uint64_t expected = 0, received = 0;
  uint64_t cpu_start = 0, hardware_start = 0;
};

Result<std::unique_ptr<BenchMsgServer>> BenchMsgServer::Start(const std::string& url,
                                                              const TransportOptions& options) {
  BX_ASSIGN_OR_RETURN(Url parsed, ParseUrl(url));
  std::unique_ptr<BenchMsgServer> server(new BenchMsgServer());
  BX_ASSIGN_OR_RETURN(server->transport_, CreateTransport(parsed.scheme, options));
  BenchMsgServer* raw = server.get();
  BX_ASSIGN_OR_RETURN(server->listener_,
                      server->transport_->Listen(
                          url, [raw](const std::shared_ptr<Socket>&) { return raw->Accept(); }));
  return server;
}

BenchMsgServer::~BenchMsgServer() {
  // The listener, then the transport (its I/O threads, which run our handlers), before the rest.
  listener_.reset();
  transport_.reset();
}

std::map<std::string, uint64_t> BenchMsgServer::last_sink_counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_sink_counters_;
}

SocketHandlers BenchMsgServer::Accept() {
  auto connection = std::make_shared<Connection>();
  return {[this, connection](Socket& socket, Buffer message) {
            OnMessage(*connection, socket, std::move(message));
          },
          {}};
}

void BenchMsgServer::OnMessage(Connection& connection, Socket& socket, Buffer message) {
  using Mode = Connection::Mode;
  switch (connection.mode) {
    case Mode::kEcho:
      socket.Send(std::move(message));
      return;
    case Mode::kSink:
      if (++connection.received < connection.expected) return;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        last_sink_counters_ = socket.counters();
      }
      connection.mode = Mode::kClosed;
      if (auto done = TextMessage(fmt::format("done {} {}", ProcessCpuNs() - connection.cpu_start,
                                              HardwareCpuNs() - connection.hardware_start));
          done.ok()) {
        socket.Send(std::move(*done));
      } else {
        socket.Close();
      }
      return;
    case Mode::kClosed:
      return;  // a client that sent more than it announced: nothing to measure
    case Mode::kOpening:
      break;
  }
  const std::string_view text = MessageText(message);
  if (text == "echo") {
    connection.mode = Mode::kEcho;
  } else if (auto count = NumberAfter(text, "sink "); count && *count > 0) {
    connection.mode = Mode::kSink;
    connection.expected = *count;
    connection.cpu_start = ProcessCpuNs();
    connection.hardware_start = HardwareCpuNs();
  } else {
    connection.mode = Mode::kClosed;
    socket.Close();  // not a bench client
    return;
  }
  if (auto ready = TextMessage("ready"); ready.ok()) {
    socket.Send(std::move(*ready));
  } else {
    socket.Close();
  }
}

}  // namespace bx::tools
