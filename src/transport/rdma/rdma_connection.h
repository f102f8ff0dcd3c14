// RdmaConnection: one engine (one RC QP) to one peer process and the logical sockets multiplexed
// over it (paper section 6.1). The connecting side numbers the channels; the accepting side
// creates a socket for each channel the peer opens. The TCP bootstrap connection stays open; its
// end, a QP error or a protocol violation ends the connection and every socket on it.
//
// Lifetime: the transport holds every live connection; each socket holds its connection. On the
// connecting side a connection with no sockets left closes itself (the transport's pool forgets
// it first, so no new socket can pick it meanwhile).
//
// Threads: Attach before Register on the set-up thread; everything else on the I/O thread
// (Register, Activate, the socket and channel events and Teardown check it in Debug builds).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bx/transport.h"
#include "engine/engine.h"
#include "engine/engine_poller.h"
#include "transport/peer_limit.h"
#include "verbs/rc_connect.h"

namespace bx::rdma {

class RdmaSocket;
class RdmaTransportImpl;

// What the accepting side needs to turn a channel the peer opens into a socket. Shared by the
// listener and its connections, which may outlive it.
struct AcceptState {
  AcceptHandler on_accept;
  std::atomic<bool> closed{false};
};

class RdmaConnection : public std::enable_shared_from_this<RdmaConnection> {
 public:
  RdmaConnection(RdmaTransportImpl& transport, std::shared_ptr<IoThread> io, std::string peer,
                 std::shared_ptr<AcceptState> accept);
  ~RdmaConnection();
  RdmaConnection(const RdmaConnection&) = delete;
  RdmaConnection& operator=(const RdmaConnection&) = delete;

  // Set-up.
  void Attach(verbs::RcQueuePair qp, std::unique_ptr<engine::Engine> engine, int bootstrap_fd);
  // Accepting side: the connection counts against max_connections_per_peer until Teardown.
  void HoldPeerSlot(transport::PeerSlot slot) { peer_slot_ = std::move(slot); }
  // Accepting side: the peer proved the privileged secret; so do the sockets it opens.
  void MarkPrivilegedPeer() { privileged_peer_ = true; }
  engine::Engine::Callbacks EngineCallbacks();
  engine::Engine& engine() { return *engine_; }
  IoThread& io() { return *io_; }
  const std::shared_ptr<IoThread>& io_thread() const { return io_; }
  engine::EnginePoller& poller() { return poller_; }  // the I/O thread's, for engines
  ibv_qp* qp() { return qp_->qp(); }
  const std::string& peer() const { return peer_; }
  bool initiator() const { return accept_ == nullptr; }
  size_t max_message_bytes() const;

  // I/O thread.
  void Register();
  // The handshake is done: start sending and watch the bootstrap connection.
  void Activate();
  // Connecting side: gives `socket` a channel and tells the peer.
  Status OpenSocket(const std::shared_ptr<RdmaSocket>& socket, SocketHandlers handlers);
  // The socket on `channel` closed locally: its queued sends fail with Aborted.
  void CloseSocket(engine::ChannelId channel);
  // Ends the connection and every socket on it with `why`; idempotent.
  void Teardown(const Status& why);
  bool torn_down() const { return torn_down_.load(std::memory_order_acquire); }
  size_t sockets() const { return sockets_.size(); }
  // The engine's counters plus sockets_on_engine (the last ones seen once the engine is gone).
  std::map<std::string, uint64_t> Counters() const;

  // Sockets currently using this connection, plus sockets being set up on it; guarded by the
  // transport's mutex (the pool picks by it and closes idle connections by it).
  size_t users = 0;

 private:
  void OnMessage(engine::ChannelId channel, Buffer message);
  void OnRemoteWrite(engine::ChannelId channel, uint16_t tag);
  void OnChannelOpen(engine::ChannelId channel);
  void OnChannelClosed(engine::ChannelId channel);
  void OnChannelReleased(engine::ChannelId channel);
  void OnBootstrapReadable();
  RdmaSocket* Find(engine::ChannelId channel);

  // Ends the engine, its sockets and the QP (the second half of Teardown, on a later turn).
  void Release(const Status& why);

  RdmaTransportImpl& transport_;  // used until Teardown only: the connection may outlive it
  const std::shared_ptr<IoThread> io_;
  engine::EnginePoller& poller_;  // io_'s
  const std::string peer_;
  std::shared_ptr<AcceptState> accept_;  // null on the connecting side
  bool privileged_peer_ = false;         // set before the handshake ends

  std::optional<verbs::RcQueuePair> qp_;
  std::unique_ptr<engine::Engine> engine_;
  int bootstrap_fd_ = -1;
  transport::PeerSlot peer_slot_;
  bool registered_ = false;
  std::map<std::string, uint64_t> final_counters_;
  std::atomic<bool> torn_down_{false};  // written on the I/O thread, read anywhere

  std::unordered_map<engine::ChannelId, std::shared_ptr<RdmaSocket>> sockets_;
  // Connecting side: channel ids in use (open, or closing until both sides have closed).
  std::vector<bool> ids_in_use_;
  engine::ChannelId next_id_ = 0;
};

}  // namespace bx::rdma
