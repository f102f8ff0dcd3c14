// The RDMA transport's internals, shared by its files: rdma_transport.cc (creation, Listen,
// Connect, Info), rdma_connection_pool.cc (the connecting side's engines per destination),
// rdma_establish.cc (an engine's set-up), rdma_listener.cc, rdma_connection.cc and
// rdma_socket.cc.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/unique_fd.h"
#include "bx/transport.h"
#include "engine/engine_poller.h"
#include "transport/peer_limit.h"
#include "transport/rdma/bootstrap.h"
#include "transport/rdma/bootstrap_auth.h"
#include "transport/rdma/io_thread_set.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/rdma/rdma_socket.h"
#include "transport/rdma/rdma_transport.h"
#include "verbs/device_choice.h"
#include "verbs/port_address.h"
#include "verbs/verbs.h"

namespace bx::rdma {

class RdmaListener;

// "InfiniBand" or "Ethernet (RoCE)", for messages and RdmaTransportInfo.
std::string_view LinkLayerName(uint8_t link_layer);

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

  // Connecting side: runs the handshake on `fd`, a blocking TCP socket connected to the
  // listener at `peer`, and returns an active connection, within `timeout`.
  Result<std::shared_ptr<RdmaConnection>> EstablishConnecting(UniqueFd fd, std::string peer,
                                                              std::chrono::milliseconds timeout);
  // Accepting side, after the listener has read `peer_hello`, authenticated the peer (`auth`,
  // when a secret is set) and counted it against max_connections_per_peer (`slot`): answers
  // and returns an active connection whose channels become sockets through `accept`.
  Result<std::shared_ptr<RdmaConnection>> EstablishAccepting(
      UniqueFd fd, std::string peer, const Hello& peer_hello, std::shared_ptr<AcceptState> accept,
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

  // The steps of EstablishConnecting and EstablishAccepting (rdma_establish.cc).
  struct LocalEnd;
  // Both sides first: QP, address, INIT, engine, initial receives, our Hello.
  Result<LocalEnd> PrepareLocalEnd(UniqueFd fd, std::string peer,
                                   std::shared_ptr<AcceptState> accept, transport::PeerSlot slot,
                                   bool privileged_peer);
  // Once the peer's Hello is known: its limits to the engine, the engine to the I/O thread.
  void Register(LocalEnd& end, const Hello& theirs);
  // Our QP to RTR and RTS towards the peer's.
  Status ConnectQueuePair(LocalEnd& end, const Hello& theirs);
  // Ends a registered connection whose handshake failed; returns `why`.
  Status Fail(LocalEnd& end, const Status& why);
  std::shared_ptr<RdmaConnection> Activate(LocalEnd& end);

  // The device is bemalloc's, opened by an earlier transport or bx::Init: fills choice_ with
  // what this transport's I/O threads would prefer. FailedPrecondition when the request names
  // another device alone.
  Status ChooseOnRegisteredDevice(std::string_view request, const std::vector<int>& cpus);

  TransportOptions options_;
  RdmaOptions rdma_;
  verbs::DeviceChoice choice_;       // which device and port, and why (verbs/device_choice.h)
  verbs::Device* device_ = nullptr;  // bemalloc's device
  // The port's address for a connection bound to no particular local address, chosen at Create.
  verbs::PortAddress default_address_;
  uint8_t port_ = 1;  // the port the device request named, else the device's first active one
  IoThreadSet io_;    // owned, or leased from the process-wide set (RdmaOptions::share_io_threads)
  std::atomic<size_t> next_io_{0};
  // Accepting side: engines per remote address (max_connections_per_peer).
  transport::PeerLimiter limiter_;
  std::atomic<uint64_t> engines_created_{0};  // engine set-ups begun, either side
  std::atomic<uint64_t> peers_refused_{0};    // bootstrap connections refused before set-up

  std::mutex mu_;
  std::unordered_map<RdmaConnection*, std::shared_ptr<RdmaConnection>> connections_;
  std::unordered_map<std::string, std::shared_ptr<Destination>> pool_;
  std::vector<RdmaListener*> listeners_;
  friend class RdmaListener;
};

}  // namespace bx::rdma
