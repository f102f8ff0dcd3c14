// The socket-like interface of bexpress (paper section 4): a Socket is one logical connection
// carrying whole messages, zero-copy, in both directions. Two transports implement it: `rdma://`
// (engines over RC QPs) and `tcp://` (the kernel stack, baseline and fallback). Code above the
// transport layer cannot tell them apart except by asking scheme().
//
// Ownership: Send() takes a Buffer and keeps it until the message has left (the NIC or the
// kernel has it); the callback then runs and the buffer is freed. A received message is a Buffer
// the application owns: it may keep it, move it to another thread and free it there.
//
// Threads: every transport runs I/O threads. Handlers (on_message, on_close, accept and send
// callbacks) run on the socket's I/O thread and must not block; hand heavy work to another thread.
// All Socket and Listener methods may be called from any thread.
//
// Lifetime: a Socket may outlive its Transport. Once the transport is destroyed its sockets have
// ended (on_close ran); Send fails, Receive returns the reason, counters() keeps the last values.
// A transport may be destroyed from one of its own handlers. rdma:// Connect from a handler fails
// at once with FailedPrecondition (the peer's answer comes through an I/O thread); tcp:// Connect
// blocks that I/O thread for its handshake.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bx/buffer.h"
#include "bx/export.h"
#include "bx/status.h"

namespace bx {

class Socket;

// A parsed `scheme://host:port`.
struct BX_EXPORT Url {
  std::string scheme;
  std::string host;
  uint16_t port = 0;
  std::string ToString() const;
};
// Parses "rdma://10.0.0.1:7000" or "tcp://localhost:0"; port 0 asks Listen for any free port.
BX_EXPORT Result<Url> ParseUrl(std::string_view url);

struct BX_EXPORT SocketHandlers {
  // One call per message, in the order the peer sent them. When empty, messages queue inside the
  // socket for Socket::Receive().
  std::function<void(Socket&, Buffer)> on_message;
  // Exactly once, when the socket ends: OK after Close(), the reason otherwise (peer gone, QP
  // error, malformed frame). Sends still pending then complete with that error first.
  std::function<void(Socket&, const Status&)> on_close;
  // rdma:// only: once per peer WriteTo into our memory, after every byte of it has landed, with
  // the tag the peer gave. Ordered with on_message: messages sent before the write arrive first.
  std::function<void(Socket&, uint16_t tag)> on_remote_write;
};

// Called on an I/O thread for each accepted socket; returns the handlers for it.
using AcceptHandler = std::function<SocketHandlers(const std::shared_ptr<Socket>&)>;
using SendCallback = std::function<void(const Status&)>;

class BX_EXPORT Socket {
 public:
  virtual ~Socket() = default;

  // Queues `message` (boundaries kept, order kept per socket). `done` runs once with OK when the
  // message has left and the buffer was released, or with the error that ended the socket.
  // Back-pressure: when the socket already holds TransportOptions::max_queued_bytes of unsent
  // messages, `done` runs at once with ResourceExhausted and the message is dropped unsent.
  virtual void Send(Buffer message, SendCallback done = {}) = 0;

  // rdma:// only: writes `message` straight into `target` in the peer's memory (one-sided RDMA
  // WRITE, no rendezvous exchange), then runs the peer socket's on_remote_write with `tag`.
  // Ordered with Send on this socket. `done` as for Send; InvalidArgument when the message is
  // longer than target.length, Unimplemented over tcp://. The peer must keep the target buffer
  // alive and untouched until its handler runs.
  virtual void WriteTo(Buffer message, RemoteBuffer target, uint16_t tag,
                       SendCallback done = {}) = 0;

  // Takes the next queued message (sockets without on_message), waiting up to `timeout`.
  // DeadlineExceeded on timeout; the close status once the socket has ended and the queue is empty.
  virtual Result<Buffer> Receive(std::chrono::milliseconds timeout) = 0;

  // Ends the socket: pending sends fail with Aborted, on_close runs with OK. Idempotent.
  virtual void Close() = 0;

  // OK while the socket is open; afterwards the reason it ended.
  virtual Status status() const = 0;
  virtual std::string_view scheme() const = 0;  // "rdma" or "tcp"
  virtual std::string peer() const = 0;         // the remote url
  // On an accepted socket: the peer proved TransportOptions::privileged_secret. False otherwise.
  virtual bool privileged_peer() const { return false; }
  // Counters: messages_sent, bytes_sent, messages_received, bytes_received, and what the
  // transport adds (credit stalls, rendezvous exchanges, ...).
  virtual std::map<std::string, uint64_t> counters() const = 0;
};

class BX_EXPORT Listener {
 public:
  virtual ~Listener() = default;
  // The bound url, with the real port when 0 was asked for.
  virtual std::string url() const = 0;
  // Stops accepting; sockets already accepted stay open.
  virtual void Close() = 0;
};

// Settings of rdma:// (paper sections 5 and 6). The defaults are the paper's; docs/ARCHITECTURE.md
// ("The engine") says what each trades.
struct BX_EXPORT RdmaOptions {
  // Work requests each RC QP may have posted (the send chain's length). Shallow keeps NIC state
  // small; 32 keeps a 64 KiB-fragment stream at line rate.
  uint32_t send_queue_depth = 32;
  // Receive buffers posted per QP; also the credits the peer starts with.
  uint32_t recv_queue_depth = 64;
  // Messages up to this size go eagerly in one SEND into a posted receive buffer of this size;
  // larger ones by rendezvous straight into the receiver's memory. 20 KiB, not 16: a 16 KiB
  // payload with the headers the layers above add (an RPC frame's 32 bytes, a PS message's) still
  // goes in one SEND, and bemalloc's size class above 16 KiB is 20 KiB anyway.
  uint32_t eager_limit = 20 << 10;
  // The rendezvous fragment: the unit the scheduler and the send window work in.
  uint32_t fragment_bytes = 64 << 10;
  // Bytes posted and not yet completed per QP (0: unlimited). Bounds what N senders can put in
  // one switch queue during an incast to N x this.
  uint64_t send_window_bytes = 128 << 10;
  // Rendezvous messages queued behind the one under way on a socket send their requests early,
  // up to this many bytes per QP (0: each waits for the one before), so that a stream of large
  // messages does not wait a round trip between every two. The receiver allocates their
  // destinations that much earlier.
  uint64_t rendezvous_ahead_bytes = 1 << 20;
  // Rendezvous targets are exposed through a memory window over exactly the buffer (where the
  // device has type 2 windows) rather than the whole registered region.
  bool scoped_remote_writes = true;
  // QPs per destination: one keeps NIC connection state minimal, more spread a bandwidth-bound
  // destination's sockets over several.
  int engines_per_destination = 1;
  // How a new socket picks among its destination's QPs.
  enum class Spread { kLeastSockets, kRoundRobin } spread = Spread::kLeastSockets;
  // How an I/O thread waits for work. Adaptive (the default) polls only while the gaps between
  // work it has seen are short, at most `spin_limit_us` (a sleep and wake-up would cost more),
  // for up to twice the expected gap and never more than `busy_poll_us`; after longer gaps it
  // arms the completion queue and sleeps at once. Off, it polls for `busy_poll_us` after every
  // piece of work (lowest latency, a core per thread under load). BX_POLLING=fixed|adaptive
  // overrides for the whole process.
  bool adaptive_polling = true;
  int spin_limit_us = 20;
  int busy_poll_us = 200;
  // Take the I/O threads (TransportOptions::io_threads of them) from one set per process,
  // device and polling settings, shared by every rdma transport that sets this, rather than
  // starting the transport's own: a process with several RPC servers and clients then polls with
  // a few threads, not a few per transport. The cost: a callback that blocks stalls the sockets
  // of all those transports. BX_SHARE_IO_THREADS=1|0 overrides for the whole process.
  bool share_io_threads = false;
  // RC transport parameters: ACK timeout exponent (4.096 us x 2^timeout, ~67 ms), retries on
  // timeout, and RNR retries (0: credits make receiver-not-ready impossible, so one is a bug
  // worth failing loudly on).
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 0;
  // Addressing (docs/DEPLOYING.md). The source GID's index on RoCE; -1 chooses per connection:
  // the RoCE v2 GID of the bootstrap connection's local address, else the first routable RoCE
  // v2 GID. BX_GID_INDEX, when set, overrides this for the whole process.
  int gid_index = -1;
  // The GRH traffic class, DSCP << 2 | ECN: 106 is DSCP 26 with ECT(0), the class lossless RoCE
  // is configured on by NVIDIA's and most switch vendors' defaults. BX_TRAFFIC_CLASS overrides.
  uint8_t traffic_class = 106;
  // The service level: on InfiniBand the subnet manager maps it to a virtual lane; on RoCE with
  // PCP trust it is the 802.1p priority, 3 being the lossless one of common configurations.
  // BX_SERVICE_LEVEL overrides.
  uint8_t service_level = 3;
};

struct BX_EXPORT TransportOptions {
  int io_threads = 1;
  // CPUs the I/O threads are pinned to, round robin (empty: where the scheduler puts them), for
  // operators who keep cores free of application work for communication. BX_IO_CPUS (a Linux CPU
  // list, "2,3" or "2-3") overrides it for every transport of the process. CreateTransport fails
  // with InvalidArgument for a malformed list or a CPU the process may not run on.
  std::vector<int> io_cpus;
  // Messages larger than this are refused (Send fails, a peer announcing one is disconnected).
  size_t max_message_bytes = size_t{1} << 30;
  // Unsent bytes at which Send starts pushing back (see Socket::Send): a high-water mark, so a
  // socket holds at most this plus one message.
  size_t max_queued_bytes = size_t{256} << 20;
  // Device for rdma:// (empty: BX_DEVICE or the first device).
  std::string device;
  RdmaOptions rdma;  // used by rdma:// only
  // Shared secret peers must prove they know before a connection is accepted (empty: off). Both
  // sides must set the same secret, or neither: a connection between a side with a secret and
  // one without, or with different secrets, is refused on both sides ("peer failed
  // authentication"), before the accepting side allocates anything for it (no QP, engine,
  // buffer or socket). The proof is an HMAC-SHA256 challenge-response over a fresh nonce from
  // each side (docs/HARDENING.md); the messages that follow are not encrypted.
  std::string auth_secret;
  // A second secret (empty: none; needs auth_secret, and must differ from it). The accepting
  // side also admits a peer that proves this one and marks its sockets privileged
  // (Socket::privileged_peer()), so that a service can keep some methods to such peers: the
  // parameter server's replica-to-replica methods. A connecting side with it set proves it
  // instead of auth_secret.
  std::string privileged_secret;
  // Connections the accepting side holds per remote IP address (0: unlimited): tcp:// sockets,
  // rdma:// engines (each carries many sockets). One more is refused before anything is
  // allocated, and its Connect fails with ResourceExhausted.
  int max_connections_per_peer = 0;
};

class BX_EXPORT Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view scheme() const = 0;
  virtual Result<std::unique_ptr<Listener>> Listen(std::string_view url,
                                                   AcceptHandler on_accept) = 0;
  virtual Result<std::shared_ptr<Socket>> Connect(std::string_view url, SocketHandlers handlers,
                                                  std::chrono::milliseconds timeout) = 0;
};

// `rdma` as every rdma:// transport of this process applies it: BX_GID_INDEX,
// BX_TRAFFIC_CLASS and BX_SERVICE_LEVEL, when set, override its addressing fields (an
// operator's per-host settings, as NCCL_IB_GID_INDEX, NCCL_IB_TC and NCCL_IB_SL), and
// BX_POLLING=adaptive|fixed and BX_SHARE_IO_THREADS=1|0 its polling fields.
// InvalidArgument naming the variable when one is malformed.
BX_EXPORT Result<RdmaOptions> ApplyRdmaEnvironment(RdmaOptions rdma);

// A new transport for `scheme` ("tcp" or "rdma") with its I/O threads running. bx::Init
// (bx/init.h) registers both; NotFound, naming the registered schemes, for any other. Destroying
// the transport ends its sockets and listeners (pending sends fail with Aborted); it must not be
// destroyed from one of its own handlers. Thread-safe.
BX_EXPORT Result<std::unique_ptr<Transport>> CreateTransport(std::string_view scheme,
                                                             const TransportOptions& options = {});

}  // namespace bx
