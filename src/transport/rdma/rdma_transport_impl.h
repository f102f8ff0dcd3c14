// The RDMA transport's internals, shared by its files: rdma_transport.cc (creation, Listen,
// Connect, Establish, Info), rdma_connection_pool.cc (the connecting side's engines per
// destination), rdma_listener.cc, rdma_connection.cc and rdma_socket.cc.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bx/transport.h"
#include "engine/engine_poller.h"
#include "transport/peer_limit.h"
#include "transport/rdma/bootstrap.h"
#include "transport/rdma/bootstrap_auth.h"
#include "transport/rdma/io_thread_set.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/rdma/rdma_socket.h"
#include "transport/rdma/rdma_transport.h"
#include "verbs/port_address.h"
#include "verbs/verbs.h"

namespace bx::rdma {

class RdmaListener;

class RdmaTransportImpl : public Transport {
 public:
  static Result<std::unique_ptr<RdmaTransportImpl>> Create(const TransportOptions& options,
                                                           const RdmaOptions& rdma);
  ~RdmaTransportImpl() override;

  std::string_view scheme() const override { return "rdma"; }
  Result<std::unique_ptr<Listener>> Listen(std::string_view url, AcceptHandler on_accept) override;
  Result<std::shared_ptr<Socket>> Connect(std::string_view url, SocketHandlers handlers,
                                          std::chrono::milliseconds timeout) override;

  const TransportOptions& options() const { return options_; }
  RdmaTransportInfo Info();

  // I/O thread: the connection has ended; the transport lets go of it.
  void Forget(RdmaConnection* connection);
  // I/O thread: a socket of `connection` (connecting side) is gone; an unused connection closes.
  void ReleaseUser(const std::shared_ptr<RdmaConnection>& connection);

  // Runs the handshake on the connected TCP socket `fd` (owned from here on) and returns an
  // active connection. `peer_hello`, `accept` and `slot` are set on the accepting side, which
  // has read the peer's Hello, authenticated it (`auth`, when a secret is set) and counted it
  // against max_connections_per_peer already. Creates the QP, engine and receive buffers.
  Result<std::shared_ptr<RdmaConnection>> Establish(
      int fd, std::string peer, const Hello* peer_hello, std::shared_ptr<AcceptState> accept,
      std::chrono::milliseconds timeout, const AcceptedAuth* auth, transport::PeerSlot slot);

 private:
  // Connections of this process to one listener url (the connecting side's pool).
  struct Destination {
    std::mutex establish_mu;  // one handshake at a time per destination
    std::vector<std::shared_ptr<RdmaConnection>> connections;
    size_t next = 0;  // round-robin cursor
  };

  RdmaTransportImpl(const TransportOptions& options, const RdmaOptions& rdma)
      : options_(options), rdma_(rdma), limiter_(options.max_connections_per_peer) {}
  // A connection to `url` for one more socket: an existing one, or a new one while the
  // destination has fewer than engines_per_destination. Counts the socket as a user.
  Result<std::shared_ptr<RdmaConnection>> Acquire(const Url& url,
                                                  std::chrono::steady_clock::time_point deadline);
  std::shared_ptr<RdmaConnection> PickLocked(Destination& destination);

  TransportOptions options_;
  RdmaOptions rdma_;
  verbs::Device* device_ = nullptr;  // bemalloc's device
  // The port's address for a connection bound to no particular local address, chosen at Create.
  verbs::PortAddress default_address_;
  uint8_t port_ = 1;  // the device's first active port
  IoThreadSet io_;    // owned, or leased from the process-wide set (RdmaOptions::share_io_threads)
  std::atomic<size_t> next_io_{0};
  // Accepting side: engines per remote address (max_connections_per_peer).
  transport::PeerLimiter limiter_;
  std::atomic<uint64_t> engines_created_{0};  // Establish calls: QPs created, either side
  std::atomic<uint64_t> peers_refused_{0};    // bootstrap connections refused before Establish

  std::mutex mu_;
  std::unordered_map<RdmaConnection*, std::shared_ptr<RdmaConnection>> connections_;
  std::unordered_map<std::string, std::shared_ptr<Destination>> pool_;
  std::vector<RdmaListener*> listeners_;
  friend class RdmaListener;
};

}  // namespace bx::rdma
