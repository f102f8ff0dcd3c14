// RdmaSocket: one logical connection, a channel of an engine that other sockets to the same peer
// may share (QP multiplexing). Application threads hand sends to the engine's I/O thread through
// the socket's queue of engine nodes (one allocation a message; the first into an empty queue
// posts the drain); they never touch the QP. The socket stays alive (held by its connection) until
// it is closed or fails, whatever the application holds.
//
// Threads: public methods from any thread; Bind/On*/Teardown on the I/O thread, WaitAccepted off
// it (checked in Debug and sanitizer builds, base/dcheck.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "bx/transport.h"
#include "engine/engine.h"
#include "engine/outgoing.h"
#include "transport/message_queue.h"
#include "transport/rdma/rdma_connection.h"

namespace bx::rdma {

class RdmaSocket : public Socket, public std::enable_shared_from_this<RdmaSocket> {
 public:
  RdmaSocket(std::shared_ptr<RdmaConnection> connection, std::string peer, size_t max_message_bytes,
             size_t max_queued_bytes);
  ~RdmaSocket() override;

  // Socket.
  void Send(Buffer message, SendCallback done) override;
  Result<Buffer> Receive(std::chrono::milliseconds timeout) override;
  void Close() override;
  Status status() const override;
  std::string_view scheme() const override { return "rdma"; }
  std::string peer() const override { return peer_; }
  bool privileged_peer() const override { return privileged_peer_; }
  // Accepted sockets on a connection whose peer proved the privileged secret. Before Bind.
  void MarkPrivilegedPeer() { privileged_peer_ = true; }
  // The engine's counters (shared with the other sockets on it) plus sockets_on_engine.
  std::map<std::string, uint64_t> counters() const override;

  void WriteTo(Buffer message, RemoteBuffer target, uint16_t tag, SendCallback done) override;

  // I/O thread. `accepted`: the accepting side's sockets are; the connecting side's wait for
  // the peer's answer (OnAccepted).
  void Bind(engine::ChannelId channel, SocketHandlers handlers, bool accepted);
  void OnAccepted();
  // Connecting side, any thread but the I/O thread: waits until the peer accepted the socket
  // (OK), refused it or the connection ended (the reason), or `deadline` passed.
  Status WaitAccepted(std::chrono::steady_clock::time_point deadline);
  void OnMessage(Buffer message);
  void OnRemoteWrite(uint16_t tag);
  // Ends the socket with `why` (OK for a local Close); the connection has let go of the channel.
  void Teardown(const Status& why, bool local_close);
  engine::ChannelId channel() const { return channel_; }
  RdmaConnection& connection() { return *connection_; }

 private:
  using Outgoing = engine::Engine::Outgoing;
  void Submit(Buffer message, std::optional<RemoteBuffer> target, uint16_t tag, SendCallback done);
  // The engine's completion hook for this socket's messages (engine::SendCompletion).
  static void SendDone(void* owner, size_t bytes, SendCallback& done, const Status& status);
  // I/O thread: hands the queued messages to the engine.
  void DrainPending();

  const std::shared_ptr<RdmaConnection> connection_;
  const std::shared_ptr<IoThread> io_;  // held: the socket may outlive its transport
  const std::string peer_;
  const size_t max_message_bytes_;
  const size_t max_queued_bytes_;
  bool privileged_peer_ = false;  // set before Bind, read-only after

  engine::ChannelId channel_ = 0;
  SocketHandlers handlers_;
  transport::MessageQueue queue_;
  std::atomic<size_t> queued_bytes_{0};
  // Messages on their way to the I/O thread, oldest first, linked through Outgoing::next.
  std::mutex pending_mu_;
  std::unique_ptr<Outgoing> pending_head_;  // guarded by pending_mu_
  Outgoing* pending_tail_ = nullptr;        // guarded by pending_mu_
  bool closing_ = false;                    // guarded by pending_mu_: Close() has been called
  bool torn_down_ = false;                  // I/O thread

  std::mutex accept_mu_;
  std::condition_variable accept_cv_;
  std::optional<Status> accept_result_;  // set once: OK, or why the socket never opened

  mutable std::mutex status_mu_;
  Status status_;
  bool ended_ = false;                              // Teardown has run
  std::map<std::string, uint64_t> final_counters_;  // kept after the socket has ended
};

}  // namespace bx::rdma
