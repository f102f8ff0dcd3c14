#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>

#include <fmt/core.h>

#include "base/cpu_list.h"
#include "base/io_thread.h"
#include "transport/peer_limit.h"
#include "transport/socket_util.h"
#include "transport/tcp/handshake.h"
#include "transport/tcp/tcp_listener.h"
#include "transport/tcp/tcp_socket.h"
#include "transport/transport_registry.h"

namespace bx::tcp {
namespace {

// Connections the kernel queues for accept(): many clients connect at once under incast.
constexpr int kListenBacklog = 4096;

Result<Url> ParseTcpUrl(std::string_view text) {
  BX_ASSIGN_OR_RETURN(Url url, ParseUrl(text));
  if (url.scheme != "tcp") {
    return InvalidArgument("the tcp transport cannot use '" + std::string(text) + "'");
  }
  return url;
}

class TcpTransport final : public Transport {
 public:
  TcpTransport(const TransportOptions& options, std::vector<std::shared_ptr<IoThread>> io_threads)
      : options_(options),
        io_threads_(std::move(io_threads)),
        limiter_(std::make_shared<transport::PeerLimiter>(options.max_connections_per_peer)) {}

  ~TcpTransport() override {
    for (const std::shared_ptr<IoThread>& io_thread : io_threads_) {
      io_thread->Stop(Aborted("tcp transport shut down"));
    }
  }

  std::string_view scheme() const override { return "tcp"; }

  Result<std::unique_ptr<Listener>> Listen(std::string_view url_text,
                                           AcceptHandler on_accept) override {
    BX_ASSIGN_OR_RETURN(Url url, ParseTcpUrl(url_text));
    BX_ASSIGN_OR_RETURN(transport::ListeningSocket listening,
                        transport::ListenOn(url, kListenBacklog));
    BX_ASSIGN_OR_RETURN(std::unique_ptr<TcpListener> listener,
                        TcpListener::Start(listening.fd, listening.url.ToString(), io_threads_,
                                           options_, limiter_, std::move(on_accept)));
    return std::unique_ptr<Listener>(std::move(listener));
  }

  Result<std::shared_ptr<Socket>> Connect(std::string_view url_text, SocketHandlers handlers,
                                          std::chrono::milliseconds timeout) override {
    BX_ASSIGN_OR_RETURN(Url url, ParseTcpUrl(url_text));
    auto deadline = std::chrono::steady_clock::now() + timeout;
    BX_ASSIGN_OR_RETURN(transport::ConnectedSocket connected, Handshake(url, deadline));
    std::shared_ptr<IoThread> io_thread =
        io_threads_[next_thread_.fetch_add(1, std::memory_order_relaxed) % io_threads_.size()];
    std::shared_ptr<TcpSocket> socket =
        TcpSocket::Create(connected.fd, io_thread, options_, connected.peer);
    BX_RETURN_IF_ERROR(socket->Start(std::move(handlers)));
    return std::shared_ptr<Socket>(std::move(socket));
  }

 private:
  // Connects and runs the handshake: accepted means the peer authenticated us (and we it) and
  // took the socket. A peer that closed on our Hello unanswered may be a version 1 build (it
  // closes on any other version): it is asked again offering version 1 alone.
  Result<transport::ConnectedSocket> Handshake(const Url& url,
                                               std::chrono::steady_clock::time_point deadline) {
    const std::string& secret = transport::auth::ProvenSecret(options_);
    bool unanswered = false;
    VersionRange offer = kHandshakeVersions;
    for (;;) {
      BX_ASSIGN_OR_RETURN(transport::ConnectedSocket connected,
                          transport::ConnectFirst(url, deadline));
      Result<uint8_t> agreed =
          ConnectingHandshake(connected.fd, secret, connected.peer, deadline, offer, &unanswered);
      if (agreed.ok()) return connected;
      ::close(connected.fd);
      if (!unanswered || offer.newest == 1)
        return agreed.status().WithContext("connect " + url.ToString());
      offer = {1, 1};
    }
  }

  const TransportOptions options_;
  const std::vector<std::shared_ptr<IoThread>> io_threads_;
  // Sockets accepted by this transport's listeners, per remote address.
  const std::shared_ptr<transport::PeerLimiter> limiter_;
  std::atomic<size_t> next_thread_{0};
};

}  // namespace

Result<std::unique_ptr<Transport>> CreateTcpTransport(const TransportOptions& options) {
  if (options.io_threads < 1) {
    return InvalidArgument(
        fmt::format("tcp transport: io_threads is {}, needs at least 1", options.io_threads));
  }
  auto cpus = IoCpusFromEnvironment(options.io_cpus);
  if (!cpus.ok()) return cpus.status().WithContext("tcp transport");
  std::vector<std::shared_ptr<IoThread>> io_threads;
  for (int i = 0; i < options.io_threads; ++i) {
    IoThreadOptions thread_options;
    thread_options.name = fmt::format("bx-tcp-io{}", i);
    thread_options.cpu = cpus->empty() ? -1 : (*cpus)[size_t(i) % cpus->size()];
    BX_ASSIGN_OR_RETURN(std::shared_ptr<IoThread> io_thread, IoThread::Start(thread_options));
    io_threads.push_back(std::move(io_thread));
  }
  return std::unique_ptr<Transport>(new TcpTransport(options, std::move(io_threads)));
}

void RegisterTcpTransport() {
  transport::RegisterTransport("tcp", &CreateTcpTransport);
}

}  // namespace bx::tcp
