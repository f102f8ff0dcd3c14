// RdmaSocket: one logical connection over one engine. Application threads hand sends to the
// engine's I/O thread through its task queue; they never touch the QP. The socket stays alive
// (held by its transport) until it is closed or fails, whatever the application holds.
//
// Threads: public methods from any thread; the On*/Activate/Teardown methods on the I/O thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "bx/transport.h"
#include "engine/engine.h"
#include "engine/io_thread.h"
#include "transport/message_queue.h"
#include "verbs/rc_connect.h"

namespace bx::rdma {

class RdmaTransportImpl;

class RdmaSocket : public Socket, public std::enable_shared_from_this<RdmaSocket> {
 public:
  RdmaSocket(RdmaTransportImpl& transport, engine::IoThread& io, std::string peer,
             size_t max_message_bytes, size_t max_queued_bytes);
  ~RdmaSocket() override;

  // Socket.
  void Send(Buffer message, SendCallback done) override;
  Result<Buffer> Receive(std::chrono::milliseconds timeout) override;
  void Close() override;
  Status status() const override;
  std::string_view scheme() const override { return "rdma"; }
  std::string peer() const override { return peer_; }
  std::map<std::string, uint64_t> counters() const override;

  // rdma:// only: writes `message` into a buffer the peer registered and described out of band
  // (address and rkey), skipping the rendezvous exchange. The peer's remote-write handler runs
  // with `tag` once every byte has landed; `done` as for Send.
  void WriteTo(Buffer message, engine::RemoteBuffer target, uint16_t tag, SendCallback done);
  // Any thread: what runs (on the I/O thread) when the peer's WriteTo into our memory lands.
  void SetRemoteWriteHandler(std::function<void(uint16_t tag)> handler);

  // Set-up (the connecting or accepting thread, before Activate).
  void Attach(verbs::RcQueuePair qp, std::unique_ptr<engine::Engine> engine, int bootstrap_fd);
  engine::Engine& engine() { return *engine_; }
  engine::IoThread& io() { return io_; }
  ibv_qp* qp() { return qp_->qp(); }
  // I/O thread: the engine delivered a message.
  void OnMessageFromEngine(Buffer message);
  void OnRemoteWrite(uint16_t tag);

  // I/O thread: install handlers and register the engine for completions. Messages that
  // arrive from then on go to the handlers (or the queue).
  void Register(SocketHandlers handlers);
  // I/O thread: the handshake is done; start sending and watch the bootstrap connection.
  void Activate();
  // I/O thread: ends the socket with `why` (OK for a local Close); idempotent.
  void Teardown(const Status& why, bool local_close);

 private:
  void OnBootstrapReadable();
  void Submit(Buffer message, std::optional<engine::RemoteBuffer> target, uint16_t tag,
              SendCallback done);

  RdmaTransportImpl& transport_;
  engine::IoThread& io_;
  const std::string peer_;
  const size_t max_message_bytes_;
  const size_t max_queued_bytes_;

  std::optional<verbs::RcQueuePair> qp_;
  std::unique_ptr<engine::Engine> engine_;
  int bootstrap_fd_ = -1;
  SocketHandlers handlers_;
  std::function<void(uint16_t)> remote_write_handler_;
  transport::MessageQueue queue_;
  std::atomic<size_t> queued_bytes_{0};
  bool registered_ = false;
  bool torn_down_ = false;  // I/O thread

  mutable std::mutex status_mu_;
  Status status_;
  std::map<std::string, uint64_t> final_counters_;  // kept after the engine is gone
};

}  // namespace bx::rdma
