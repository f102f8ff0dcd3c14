// The RDMA transport's internals, shared by rdma_transport.cc and rdma_socket.cc.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bx/transport.h"
#include "engine/io_thread.h"
#include "transport/rdma/bootstrap.h"
#include "transport/rdma/rdma_socket.h"
#include "transport/rdma/rdma_transport.h"
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

  // I/O thread: the socket has ended; the transport lets go of it.
  void Forget(RdmaSocket* socket);

  // Runs the handshake on the connected TCP socket `fd` (owned from here on) and returns an
  // active socket. `peer_hello` is set on the accepting side, which has read it already.
  using HandlersFor = std::function<SocketHandlers(const std::shared_ptr<RdmaSocket>&)>;
  Result<std::shared_ptr<RdmaSocket>> Establish(int fd, std::string peer, const Hello* peer_hello,
                                                HandlersFor handlers_for,
                                                std::chrono::milliseconds timeout);

 private:
  RdmaTransportImpl(const TransportOptions& options, const RdmaOptions& rdma)
      : options_(options), rdma_(rdma) {}

  TransportOptions options_;
  RdmaOptions rdma_;
  verbs::Device* device_ = nullptr;  // bemalloc's device
  std::vector<std::unique_ptr<engine::IoThread>> io_;
  std::vector<ibv_pd*> io_domains_;  // a parent domain per I/O thread (its thread domain)
  std::atomic<size_t> next_io_{0};

  std::mutex mu_;
  std::unordered_map<RdmaSocket*, std::shared_ptr<RdmaSocket>> sockets_;
  std::vector<RdmaListener*> listeners_;
  friend class RdmaListener;
};

}  // namespace bx::rdma
