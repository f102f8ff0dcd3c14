// TcpListener: a bx::Listener on a listening kernel socket. Its I/O thread accepts connections
// and hands each to an I/O thread of the transport, round-robin, where the connection runs the
// handshake (handshake.h: authentication, max_connections_per_peer) without blocking, within
// 5 s. Only a connection that passes becomes a TcpSocket; the AcceptHandler runs on that
// socket's I/O thread, before the socket reads anything.
//
// Threads: url() and Close() may be called from any thread. Close() from a thread that is not an
// I/O thread returns after the listening socket is closed (new connections are refused).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/io_thread.h"
#include "bx/transport.h"
#include "transport/peer_limit.h"

namespace bx::tcp {

class TcpListener final : public Listener {
 public:
  // Takes ownership of `fd` (bound, listening, non-blocking) and starts accepting on the first
  // of `io_threads`. `limiter` counts the transport's accepted sockets per remote address.
  static Result<std::unique_ptr<TcpListener>> Start(
      int fd, std::string url, std::vector<std::shared_ptr<IoThread>> io_threads,
      const TransportOptions& options, std::shared_ptr<transport::PeerLimiter> limiter,
      AcceptHandler on_accept);
  ~TcpListener() override;

  std::string url() const override { return url_; }
  void Close() override;

 private:
  class Acceptor;
  TcpListener(std::string url, std::shared_ptr<Acceptor> acceptor)
      : url_(std::move(url)), acceptor_(std::move(acceptor)) {}

  const std::string url_;
  const std::shared_ptr<Acceptor> acceptor_;
};

}  // namespace bx::tcp
