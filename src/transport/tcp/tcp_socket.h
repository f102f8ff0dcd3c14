// TcpSocket: a bx::Socket over one connected, non-blocking kernel TCP socket (tcp://).
//
// Sending: Send() writes at once from the calling thread when nothing is queued ahead of it (one
// sendmsg of header + payload, no thread hop on the latency path); what the kernel does not take
// stays in a bounded queue that the I/O thread drains when epoll reports the socket writable.
// Receiving: the I/O thread reads into a small staging area, from which headers are parsed and
// small payloads copied into a bemalloc Buffer; a large payload is read by the kernel straight
// into the Buffer (readv of [payload, next header]), so large messages are copied once.
//
// Threads: every bx::Socket method may be called from any thread. Handlers and send callbacks run
// on the socket's I/O thread, except that a Send refused at once (closed socket, too large,
// back-pressure) calls `done` on the calling thread before Send returns. OnEvents and Shutdown
// are called by the I/O thread only.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/io_thread.h"
#include "bx/transport.h"
#include "transport/message_queue.h"
#include "transport/peer_limit.h"
#include "transport/tcp/frame.h"

namespace bx::tcp {

class TcpSocket final : public Socket,
                        public IoThread::Handler,
                        public std::enable_shared_from_this<TcpSocket> {
 public:
  // Takes ownership of `fd` (connected, non-blocking). Nothing happens until Start.
  static std::shared_ptr<TcpSocket> Create(int fd, std::shared_ptr<IoThread> io_thread,
                                           const TransportOptions& options, std::string peer);
  ~TcpSocket() override;

  // Installs the handlers and registers with the I/O thread. Call once, from any thread.
  Status Start(SocketHandlers handlers);
  // Accepted sockets: counts against max_connections_per_peer until the socket ends. Before
  // Start.
  void HoldPeerSlot(transport::PeerSlot slot) { peer_slot_ = std::move(slot); }
  // Accepted sockets whose peer proved the privileged secret. Before Start.
  void MarkPrivilegedPeer() { privileged_peer_ = true; }

  void Send(Buffer message, SendCallback done) override;
  // Unimplemented: the kernel stack has no one-sided writes.
  void WriteTo(Buffer message, RemoteBuffer target, uint16_t tag, SendCallback done) override;
  Result<Buffer> Receive(std::chrono::milliseconds timeout) override;
  void Close() override;
  Status status() const override;
  std::string_view scheme() const override { return "tcp"; }
  std::string peer() const override { return peer_; }
  bool privileged_peer() const override { return privileged_peer_; }
  std::map<std::string, uint64_t> counters() const override;

  void OnEvents(uint32_t events) override;
  void Shutdown(const Status& reason) override;

 private:
  struct PendingSend {
    FrameHeader header;
    Buffer message;
    SendCallback done;
    size_t bytes_written = 0;  // of header + payload
  };
  // Sends that left the socket (or failed), completed once the lock is dropped.
  using Finished = std::vector<PendingSend>;

  TcpSocket(int fd, std::shared_ptr<IoThread> io_thread, const TransportOptions& options,
            std::string peer);

  // Writes queued frames until the queue is empty or the kernel pushes back. send_mutex_ held.
  void FlushLocked(Finished* finished);
  // Frees the buffers of `finished`, then runs their callbacks with `status` (on the I/O thread).
  void Complete(Finished finished, const Status& status);
  // Marks the socket as ending with `reason` (the first reason wins). send_mutex_ held.
  void BeginEndingLocked(Status reason);

  void ReadAvailable();
  // Consumes `bytes_read` new bytes: `into_payload` of them landed in the payload being read, the
  // rest at the end of the staging area. Delivers each complete message.
  Status ConsumeRead(size_t into_payload, size_t into_staging);
  Status StartMessage(uint64_t length);
  void Deliver(Buffer message);
  // Ends the socket on the I/O thread, once: fails pending sends, then on_close.
  void Teardown(Status reason);

  const int fd_;
  const std::shared_ptr<IoThread> io_thread_;
  const size_t max_message_bytes_;
  const size_t max_queued_bytes_;
  const std::string peer_;

  // I/O thread only (set before Start).
  SocketHandlers handlers_;
  transport::PeerSlot peer_slot_;
  bool privileged_peer_ = false;  // set before Start, read-only after
  bool torn_down_ = false;
  std::vector<std::byte> staging_;  // received bytes not yet parsed: [staged_begin_, staged_end_)
  size_t staged_begin_ = 0;
  size_t staged_end_ = 0;
  // The message whose payload is being read: its announced length, and a buffer that grows
  // toward it as bytes arrive (GrowIncoming), so that memory follows what the peer has sent,
  // not what its header claims.
  Buffer incoming_;
  size_t incoming_length_ = 0;
  size_t incoming_filled_ = 0;
  bool reading_payload_ = false;
  bool large_messages_ = false;  // the last message was large: read up to the next header only
  Status GrowIncoming();

  transport::MessageQueue received_;
  // Start gave an on_message handler, so Receive() is refused. False until then: the accept
  // handler hands the socket to the application before Start, which may Receive at once.
  std::atomic<bool> has_message_handler_{false};
  std::atomic<bool> close_requested_{false};

  mutable std::mutex send_mutex_;  // guards what follows
  Status status_;                  // OK while open; set once when the socket starts ending
  bool closed_locally_ = false;
  std::deque<PendingSend> send_queue_;
  size_t queued_bytes_ = 0;      // payload bytes in send_queue_ not yet written
  bool writable_armed_ = false;  // EPOLLOUT is being watched

  struct Counters {
    std::atomic<uint64_t> messages_sent{0};
    std::atomic<uint64_t> bytes_sent{0};
    std::atomic<uint64_t> messages_received{0};
    std::atomic<uint64_t> bytes_received{0};
    std::atomic<uint64_t> sendmsg_calls{0};
    std::atomic<uint64_t> read_calls{0};
    std::atomic<uint64_t> sends_refused_queue_full{0};
    std::atomic<uint64_t> send_queue_stalls{0};  // times the kernel pushed back (EAGAIN)
    std::atomic<uint64_t> staged_copy_bytes{0};  // payload bytes copied out of staging
    std::atomic<uint64_t> grown_copy_bytes{0};   // payload bytes copied when a buffer grew
  };
  Counters counters_;
};

}  // namespace bx::tcp
