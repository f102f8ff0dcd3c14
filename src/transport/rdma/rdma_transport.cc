#include "transport/rdma/rdma_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "bx/bemalloc.h"
#include "transport/rdma/rdma_transport_impl.h"
#include "transport/socket_util.h"
#include "transport/transport_registry.h"
#include "verbs/rc_connect.h"

namespace bx::rdma {
namespace {

constexpr int kListenBacklog = 4096;
// An accepted connection must finish its handshake within this; a silent client cannot hold the
// acceptor longer.
constexpr std::chrono::milliseconds kAcceptHandshakeTimeout{5000};
// How often the acceptor looks at its stop flag.
constexpr int kAcceptPollMs = 100;
// Inline capacity asked of the QP: rendezvous control payloads (16 bytes) go inline.
constexpr uint32_t kInlineBytes = 64;

Result<Url> ParseRdmaUrl(std::string_view text) {
  Result<Url> url = ParseUrl(text);
  if (!url.ok()) return url.status();
  if (url->scheme != "rdma")
    return InvalidArgument("the rdma transport cannot use '" + std::string(text) + "'");
  return url;
}

void SetBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

}  // namespace

// Accepts bootstrap connections on its own thread and runs their handshakes there, so a slow
// handshake never stalls an I/O thread.
class RdmaListener : public Listener {
 public:
  RdmaListener(RdmaTransportImpl& transport, transport::ListeningSocket socket,
               AcceptHandler on_accept)
      : transport_(transport), socket_(std::move(socket)), on_accept_(std::move(on_accept)) {
    thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~RdmaListener() override { Close(); }

  std::string url() const override { return socket_.url.ToString(); }

  void Close() override {
    if (stop_.exchange(true)) return;
    if (thread_.joinable()) thread_.join();
    ::close(socket_.fd);
    std::lock_guard lock(transport_.mu_);
    std::erase(transport_.listeners_, this);
  }

 private:
  void AcceptLoop() {
    while (!stop_.load()) {
      pollfd p{socket_.fd, POLLIN, 0};
      if (poll(&p, 1, kAcceptPollMs) <= 0) continue;
      sockaddr_storage address{};
      socklen_t length = sizeof(address);
      int fd = accept4(socket_.fd, reinterpret_cast<sockaddr*>(&address), &length, SOCK_CLOEXEC);
      if (fd < 0) continue;
      (void)transport::SetNoDelay(fd);
      std::string peer =
          transport::FormatAddress("rdma", reinterpret_cast<sockaddr*>(&address), length);
      Result<Hello> hello = ReceiveHello(fd, kAcceptHandshakeTimeout);
      if (!hello.ok()) {
        // Nothing was allocated for this peer; it sees the connection close.
        std::fprintf(stderr, "bx rdma: refused %s: %s\n", peer.c_str(),
                     hello.status().ToString().c_str());
        ::close(fd);
        continue;
      }
      auto socket = transport_.Establish(
          fd, peer, &*hello, [this](const std::shared_ptr<RdmaSocket>& s) { return on_accept_(s); },
          kAcceptHandshakeTimeout);
      if (!socket.ok()) {
        std::fprintf(stderr, "bx rdma: handshake with %s failed: %s\n", peer.c_str(),
                     socket.status().ToString().c_str());
      }
    }
  }

  RdmaTransportImpl& transport_;
  transport::ListeningSocket socket_;
  AcceptHandler on_accept_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Result<std::unique_ptr<RdmaTransportImpl>> RdmaTransportImpl::Create(
    const TransportOptions& options, const RdmaOptions& rdma) {
  std::unique_ptr<RdmaTransportImpl> t(new RdmaTransportImpl(options, rdma));
  // bemalloc's device is the transport's device: its keys are only valid in its PD.
  static std::mutex init_mu;
  {
    std::lock_guard lock(init_mu);
    t->device_ = bemalloc::RegisteredDevice();
    if (t->device_ == nullptr) {
      if (bemalloc::IsInitialized())
        return FailedPrecondition(
            "rdma transport: bemalloc was initialised without a verbs device; its buffers "
            "cannot be sent over RDMA");
      auto device = verbs::Device::Open(options.device);
      if (!device.ok()) return device.status().WithContext("rdma transport");
      t->device_ = new verbs::Device(std::move(device).value());  // lives as long as bemalloc
      BX_RETURN_IF_ERROR(bemalloc::Init(*t->device_));
    } else if (!options.device.empty() && options.device != t->device_->name()) {
      return FailedPrecondition("rdma transport: bemalloc registers on " + t->device_->name() +
                                ", cannot run on " + options.device);
    }
  }
  if (t->device_->port().state != IBV_PORT_ACTIVE)
    return Unavailable("rdma transport: port 1 of " + t->device_->name() + " is not active");
  verbs::Library& lib = t->device_->lib();
  int threads = std::max(1, options.io_threads);
  for (int i = 0; i < threads; ++i) {
    engine::IoThreadOptions io_options;
    io_options.busy_poll_us = rdma.busy_poll_us;
    io_options.name = "bx-rdma-io" + std::to_string(i);
    auto io = engine::IoThread::Create(lib, t->device_->context(), io_options);
    if (!io.ok()) return io.status().WithContext("rdma transport");
    // QPs of one I/O thread live in a parent domain carrying its thread domain.
    ibv_pd* domain = t->device_->pd();
    if ((*io)->td() != nullptr) {
      ibv_parent_domain_init_attr attr{};
      attr.pd = t->device_->pd();
      attr.td = (*io)->td();
      if (ibv_pd* parent = verbs::Library::AllocParentDomain(t->device_->context(), &attr))
        domain = parent;
    }
    t->io_domains_.push_back(domain);
    t->io_.push_back(std::move(io).value());
  }
  return t;
}

RdmaTransportImpl::~RdmaTransportImpl() {
  std::vector<RdmaListener*> listeners;
  {
    std::lock_guard lock(mu_);
    listeners = listeners_;
  }
  for (RdmaListener* l : listeners) l->Close();
  std::vector<std::shared_ptr<RdmaSocket>> sockets;
  {
    std::lock_guard lock(mu_);
    for (auto& [raw, s] : sockets_) sockets.push_back(s);
  }
  for (auto& s : sockets)
    s->io().Run([&] { s->Teardown(Aborted("rdma transport shut down"), false); });
  sockets.clear();
  for (auto& io : io_) io->Stop();
  for (ibv_pd* domain : io_domains_)
    if (domain != device_->pd()) device_->lib().dealloc_pd(domain);
  io_.clear();
}

void RdmaTransportImpl::Forget(RdmaSocket* socket) {
  std::lock_guard lock(mu_);
  sockets_.erase(socket);
}

Result<std::unique_ptr<Listener>> RdmaTransportImpl::Listen(std::string_view url_text,
                                                            AcceptHandler on_accept) {
  Result<Url> url = ParseRdmaUrl(url_text);
  if (!url.ok()) return url.status();
  Result<transport::ListeningSocket> listening = transport::ListenOn(*url, kListenBacklog);
  if (!listening.ok()) return listening.status();
  SetBlocking(listening->fd);
  auto listener =
      std::make_unique<RdmaListener>(*this, std::move(listening).value(), std::move(on_accept));
  std::lock_guard lock(mu_);
  listeners_.push_back(listener.get());
  return std::unique_ptr<Listener>(std::move(listener));
}

Result<std::shared_ptr<Socket>> RdmaTransportImpl::Connect(std::string_view url_text,
                                                           SocketHandlers handlers,
                                                           std::chrono::milliseconds timeout) {
  Result<Url> url = ParseRdmaUrl(url_text);
  if (!url.ok()) return url.status();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Result<transport::ConnectedSocket> connected = transport::ConnectFirst(*url, deadline);
  if (!connected.ok()) return connected.status();
  SetBlocking(connected->fd);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  auto socket = Establish(
      connected->fd, url->ToString(), nullptr,
      [&handlers](const std::shared_ptr<RdmaSocket>&) { return std::move(handlers); },
      std::max(left, std::chrono::milliseconds(1)));
  if (!socket.ok()) return socket.status().WithContext("connect " + url->ToString());
  return std::shared_ptr<Socket>(std::move(socket).value());
}

Result<std::shared_ptr<RdmaSocket>> RdmaTransportImpl::Establish(
    int fd, std::string peer, const Hello* peer_hello, HandlersFor handlers_for,
    std::chrono::milliseconds timeout) {
  verbs::Library& lib = device_->lib();
  size_t index = next_io_.fetch_add(1, std::memory_order_relaxed) % io_.size();
  engine::IoThread& io = *io_[index];
  auto socket = std::make_shared<RdmaSocket>(*this, io, peer, options_.max_message_bytes,
                                             options_.max_queued_bytes);
  const engine::EngineConfig& config = rdma_.engine;
  verbs::QueuePairAttrs attrs;
  attrs.max_send_wr = config.send_queue_depth;
  attrs.max_recv_wr = config.recv_queue_depth;
  attrs.max_inline_data = kInlineBytes;
  auto qp = verbs::CreateRcQueuePair(lib, device_->context(), io_domains_[index], attrs, io.cq());
  if (!qp.ok()) {
    ::close(fd);
    return qp.status();
  }
  verbs::RcOptions rc;
  rc.timeout = rdma_.timeout;
  rc.retry_cnt = rdma_.retry_cnt;
  rc.rnr_retry = rdma_.rnr_retry;
  rc.mtu = std::min(device_->port().active_mtu, IBV_MTU_4096);
  if (Status s = verbs::MoveRcToInit(lib, qp->qp(), 1, rc); !s.ok()) {
    ::close(fd);
    return s;
  }
  engine::EngineConfig engine_config = config;
  engine_config.max_message_bytes = options_.max_message_bytes;
  RdmaSocket* raw = socket.get();
  engine::Engine::Callbacks callbacks;
  callbacks.on_message = [raw](Buffer message) { raw->OnMessageFromEngine(std::move(message)); };
  callbacks.on_remote_write = [raw](uint16_t tag) { raw->OnRemoteWrite(tag); };
  callbacks.on_failure = [raw](const Status& why) {
    // Not from inside the engine's own call stack: tear down on the next turn of the loop.
    auto self = raw->shared_from_this();
    raw->io().Post([self, why] { self->Teardown(why, false); });
  };
  auto engine = std::make_unique<engine::Engine>(lib, qp->qp(), engine_config, callbacks);
  // Receives are posted before the peer learns our QP number: no request can find none (RNR).
  if (Status s = engine->PostInitialReceives(); !s.ok()) {
    ::close(fd);
    return s;
  }
  const uint32_t qpn = qp->qp_num();
  socket->Attach(std::move(qp).value(), std::move(engine), fd);

  Hello mine;
  mine.qp_num = qpn;
  mine.gid = device_->gid();
  mine.recv_queue_depth = config.recv_queue_depth;
  mine.eager_limit = config.eager_limit;
  mine.max_message_bytes = options_.max_message_bytes;
  Hello theirs;
  if (peer_hello == nullptr) {
    BX_RETURN_IF_ERROR(SendHello(fd, mine));
    auto hello = ReceiveHello(fd, timeout);
    if (!hello.ok()) return hello.status();
    theirs = *hello;
  } else {
    theirs = *peer_hello;
  }
  socket->engine().SetPeer({theirs.recv_queue_depth, theirs.eager_limit, theirs.max_message_bytes});

  // Register handlers (on the I/O thread, as the interface promises) before the peer can send.
  io.Run([&] { socket->Register(handlers_for(socket)); });
  {
    std::lock_guard lock(mu_);
    sockets_[raw] = socket;
  }
  auto fail = [&](const Status& s) {
    io.Run([&] { socket->Teardown(s, false); });
    return s;
  };
  rc.psn = mine.psn;
  rc.remote_psn = theirs.psn;
  if (Status s = verbs::MoveRcToRts(lib, socket->qp(), 1, theirs.qp_num, theirs.gid, rc); !s.ok())
    return fail(s);
  if (peer_hello != nullptr) {
    if (Status s = SendHello(fd, mine); !s.ok()) return fail(s);
    if (Status s = ReceiveReady(fd, timeout); !s.ok()) return fail(s);
  } else {
    if (Status s = SendReady(fd); !s.ok()) return fail(s);
  }
  io.Post([socket] { socket->Activate(); });
  return socket;
}

Result<std::unique_ptr<Transport>> CreateRdmaTransport(const TransportOptions& options) {
  return CreateRdmaTransport(options, RdmaOptions{});
}

Result<std::unique_ptr<Transport>> CreateRdmaTransport(const TransportOptions& options,
                                                       const RdmaOptions& rdma) {
  auto t = RdmaTransportImpl::Create(options, rdma);
  if (!t.ok()) return t.status();
  return std::unique_ptr<Transport>(std::move(t).value());
}

void RegisterRdmaTransport() {
  transport::RegisterTransport(
      "rdma", [](const TransportOptions& options) { return CreateRdmaTransport(options); });
}

}  // namespace bx::rdma
