#include "transport/rdma/rdma_transport.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>

#include "alloc/verbs_registrar.h"
#include "base/cpu_list.h"
#include "base/log_internal.h"
#include "base/loop_tasks.h"
#include "bx/bemalloc.h"
#include "bx/log.h"
#include "transport/rdma/rdma_environment.h"
#include "transport/rdma/rdma_listener.h"
#include "transport/rdma/rdma_transport_impl.h"
#include "transport/socket_util.h"
#include "transport/transport_registry.h"
#include "verbs/port_address.h"
#include "verbs/rc_connect.h"

namespace bx::rdma {
namespace {

constexpr int kListenBacklog = 4096;
// Inline capacity asked of the QP: the engine's control payloads go inline (engine/wire.h).
constexpr uint32_t kInlineBytes = engine::kMaxInlinePayloadBytes;

// A random 24-bit first PSN per connection, as rdma_cm picks one: a stale packet of an earlier
// connection between the same QP numbers then cannot fall into the new one's window.
uint32_t RandomPsn() {
  thread_local std::mt19937 generator{std::random_device{}()};
  return generator() & 0xffffff;
}

std::string_view LinkLayerName(uint8_t link_layer) {
  return link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "Ethernet (RoCE)";
}

// The local address of the bootstrap socket, which picks the RoCE GID.
std::optional<sockaddr_storage> LocalAddress(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return std::nullopt;
  return address;
}

// The engine's settings from the public RdmaOptions, whose defaults must stay the engine's.
engine::EngineConfig EngineConfigOf(const RdmaOptions& rdma) {
  engine::EngineConfig config;
  config.send_queue_depth = rdma.send_queue_depth;
  config.recv_queue_depth = rdma.recv_queue_depth;
  config.eager_limit = rdma.eager_limit;
  config.fragment_bytes = rdma.fragment_bytes;
  config.send_window_bytes = rdma.send_window_bytes;
  config.rendezvous_ahead_bytes = rdma.rendezvous_ahead_bytes;
  config.scoped_remote_writes = rdma.scoped_remote_writes;
  return config;
}
static_assert(RdmaOptions{}.send_queue_depth == engine::EngineConfig{}.send_queue_depth &&
              RdmaOptions{}.recv_queue_depth == engine::EngineConfig{}.recv_queue_depth &&
              RdmaOptions{}.eager_limit == engine::EngineConfig{}.eager_limit &&
              RdmaOptions{}.fragment_bytes == engine::EngineConfig{}.fragment_bytes &&
              RdmaOptions{}.send_window_bytes == engine::EngineConfig{}.send_window_bytes &&
              RdmaOptions{}.rendezvous_ahead_bytes ==
                  engine::EngineConfig{}.rendezvous_ahead_bytes &&
              RdmaOptions{}.scoped_remote_writes == engine::EngineConfig{}.scoped_remote_writes);

Result<Url> ParseRdmaUrl(std::string_view text) {
  BX_ASSIGN_OR_RETURN(Url url, ParseUrl(text));
  if (url.scheme != "rdma")
    return InvalidArgument("the rdma transport cannot use '" + std::string(text) + "'");
  return url;
}

}  // namespace

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
  auto port = verbs::FirstActivePort(*t->device_);
  if (!port.ok()) return port.status().WithContext("rdma transport");
  t->port_ = *port;
  BX_RETURN_IF_ERROR(ApplyEnvironment(t->rdma_));
  // Queue depths the device cannot give would fail every QP later; say so now.
  const uint32_t max_wr = uint32_t(std::max(t->device_->attr().max_qp_wr, 0));
  if (rdma.send_queue_depth > max_wr || rdma.recv_queue_depth > max_wr)
    return InvalidArgument("rdma transport: send_queue_depth " +
                           std::to_string(rdma.send_queue_depth) + " or recv_queue_depth " +
                           std::to_string(rdma.recv_queue_depth) + " exceeds " +
                           t->device_->name() + "'s max_qp_wr " + std::to_string(max_wr));
  // Fails now, saying why, when the port has no usable address for any connection.
  auto address = verbs::ResolvePortAddress(*t->device_, t->port_, nullptr, t->rdma_.gid_index);
  if (!address.ok()) return address.status().WithContext("rdma transport");
  t->default_address_ = *address;
  IoThreadOptions io_options;
  io_options.busy_poll_us = t->rdma_.busy_poll_us;
  io_options.adaptive_polling = t->rdma_.adaptive_polling;
  io_options.spin_limit_us = t->rdma_.spin_limit_us;
  io_options.name = "bx-rdma-io";
  auto cpus = IoCpusFromEnvironment(options.io_cpus);
  if (!cpus.ok()) return cpus.status().WithContext("rdma transport");
  io_options.cpus = std::move(cpus).value();
  BX_ASSIGN_OR_RETURN(t->io_, IoThreadSet::Acquire(*t->device_, io_options, options.io_threads,
                                                   t->rdma_.share_io_threads));
  return t;
}

RdmaTransportImpl::~RdmaTransportImpl() {
  std::vector<RdmaListener*> listeners;
  {
    std::lock_guard lock(mu_);
    listeners = listeners_;
  }
  for (RdmaListener* l : listeners) l->Close();
  std::vector<std::shared_ptr<RdmaConnection>> connections;
  {
    std::lock_guard lock(mu_);
    for (auto& [raw, c] : connections_) connections.push_back(c);
  }
  for (auto& c : connections)
    c->io().RunAndWait([&] { c->Teardown(Aborted("rdma transport shut down")); });
  connections.clear();
  // Each thread runs what its connections left it (their QPs' destruction) before it ends; a
  // thread goes with its domain and CQ when the last socket using it does.
  io_.Release();
}

Result<std::unique_ptr<Listener>> RdmaTransportImpl::Listen(std::string_view url_text,
                                                            AcceptHandler on_accept) {
  BX_ASSIGN_OR_RETURN(Url url, ParseRdmaUrl(url_text));
  BX_ASSIGN_OR_RETURN(transport::ListeningSocket listening,
                      transport::ListenOn(url, kListenBacklog));
  transport::SetBlocking(listening.fd);
  auto listener = std::make_unique<RdmaListener>(*this, std::move(listening), std::move(on_accept));
  std::lock_guard lock(mu_);
  listeners_.push_back(listener.get());
  return std::unique_ptr<Listener>(std::move(listener));
}

Result<std::shared_ptr<Socket>> RdmaTransportImpl::Connect(std::string_view url_text,
                                                           SocketHandlers handlers,
                                                           std::chrono::milliseconds timeout) {
  BX_ASSIGN_OR_RETURN(Url url, ParseRdmaUrl(url_text));
  // A socket is handed out once the peer accepted it, an answer an I/O thread brings (perhaps
  // this one): waiting for it here could only end in the timeout.
  if (LoopTasks::OnAnyLoop()) {
    return FailedPrecondition("rdma: Connect(" + std::string(url_text) +
                              ") on an I/O thread (a socket callback) would wait for an I/O "
                              "thread; connect from another thread");
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto connection = Acquire(url, deadline);
  if (!connection.ok()) return connection.status().WithContext("connect " + url.ToString());
  std::shared_ptr<RdmaConnection> c = std::move(connection).value();
  auto socket = std::make_shared<RdmaSocket>(c, url.ToString(), options_.max_message_bytes,
                                             options_.max_queued_bytes);
  Status opened;
  c->io().RunAndWait([&] {
    opened = c->OpenSocket(socket, std::move(handlers));
    if (!opened.ok()) ReleaseUser(c);
  });
  if (!opened.ok()) return opened.WithContext("connect " + url.ToString());
  // Connected means accepted: the peer's listener has taken the socket.
  if (Status accepted = socket->WaitAccepted(deadline); !accepted.ok()) {
    socket->Close();
    return accepted.WithContext("connect " + url.ToString());
  }
  return std::shared_ptr<Socket>(std::move(socket));
}

Result<std::shared_ptr<RdmaConnection>> RdmaTransportImpl::Establish(
    int fd, std::string peer, const Hello* peer_hello, std::shared_ptr<AcceptState> accept,
    std::chrono::milliseconds timeout, const AcceptedAuth* auth, transport::PeerSlot slot) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  engines_created_.fetch_add(1, std::memory_order_relaxed);
  verbs::Library& lib = device_->lib();
  const auto& threads = io_.threads();
  size_t index = next_io_.fetch_add(1, std::memory_order_relaxed) % threads.size();
  const std::shared_ptr<IoThread>& io_thread = threads[index];
  IoThread& io = *io_thread;
  engine::EnginePoller& poller = engine::EnginePoller::Of(io);
  // From here on the connection owns fd and closes it however set-up ends.
  auto connection = std::make_shared<RdmaConnection>(*this, io_thread, peer, std::move(accept));
  connection->HoldPeerSlot(std::move(slot));
  if (auth != nullptr && auth->privileged) connection->MarkPrivilegedPeer();
  // The accepting side proves the secret the peer proved; the connecting side its own choice.
  const std::string& secret =
      auth != nullptr && auth->privileged ? options_.privileged_secret : options_.auth_secret;
  const engine::EngineConfig config = EngineConfigOf(rdma_);
  verbs::QueuePairAttrs attrs;
  attrs.max_send_wr = config.send_queue_depth;
  attrs.max_recv_wr = config.recv_queue_depth;
  attrs.max_inline_data = kInlineBytes;
  auto qp = verbs::CreateRcQueuePair(lib, device_->context(), poller.pd(), attrs, poller.cq());
  if (!qp.ok()) {
    ::close(fd);
    return qp.status();
  }
  const std::optional<sockaddr_storage> local = LocalAddress(fd);
  auto address = verbs::ResolvePortAddress(
      *device_, port_, local ? reinterpret_cast<const sockaddr*>(&*local) : nullptr,
      rdma_.gid_index);
  if (!address.ok()) {
    ::close(fd);
    return address.status();
  }
  verbs::RcOptions rc;
  rc.timeout = rdma_.timeout;
  rc.retry_cnt = rdma_.retry_cnt;
  rc.rnr_retry = rdma_.rnr_retry;
  rc.traffic_class = rdma_.traffic_class;
  rc.service_level = rdma_.service_level;
  if (Status s = verbs::MoveRcToInit(lib, qp->qp(), port_, rc); !s.ok()) {
    ::close(fd);
    return s;
  }
  engine::EngineConfig engine_config = config;
  engine_config.max_message_bytes = options_.max_message_bytes;
  auto engine =
      std::make_unique<engine::Engine>(lib, qp->qp(), engine_config, connection->EngineCallbacks());
  // Receives are posted before the peer learns our QP number: no request can find none (RNR).
  if (Status s = engine->PostInitialReceives(); !s.ok()) {
    ::close(fd);
    return s;
  }
  const uint32_t qpn = qp->qp_num();
  connection->Attach(std::move(qp).value(), std::move(engine), fd);

  Hello mine;
  mine.qp_num = qpn;
  mine.gid = address->gid;
  mine.lid = address->lid;
  mine.link_layer = address->link_layer;
  mine.mtu = address->active_mtu;
  mine.psn = RandomPsn();
  mine.recv_queue_depth = config.recv_queue_depth;
  mine.eager_limit = config.eager_limit;
  mine.max_message_bytes = options_.max_message_bytes;
  Hello theirs;
  if (peer_hello == nullptr) {
    BX_ASSIGN_OR_RETURN(
        theirs,
        ConnectingHandshake(fd, mine, transport::auth::ProvenSecret(options_), peer, deadline));
  } else {
    theirs = *peer_hello;
  }
  connection->engine().SetPeer(
      {theirs.recv_queue_depth, theirs.eager_limit, theirs.max_message_bytes});

  // Registered with the I/O thread before the peer can send.
  io.RunAndWait([&] { connection->Register(); });
  {
    std::lock_guard lock(mu_);
    connections_[connection.get()] = connection;
  }
  auto fail = [&](const Status& s) {
    io.RunAndWait([&] { connection->Teardown(s); });
    return s;
  };
  if (theirs.link_layer != mine.link_layer) {
    const Status mismatch = FailedPrecondition(
        "rdma: the peer's port is " + std::string(LinkLayerName(theirs.link_layer)) + ", ours is " +
        std::string(LinkLayerName(mine.link_layer)) +
        ": an InfiniBand port and a RoCE port cannot reach each other");
    // The accepting side still answers with its Hello, so the peer can say the same.
    if (peer_hello != nullptr) (void)SendAcceptingHello(fd, mine, secret, auth, deadline);
    return fail(mismatch);
  }
  if (DebugAddressing()) {
    // Asked for with BX_DEBUG=1: to the sink, or to stderr when the program has none.
    LogRequested(LogLevel::kDebug,
                 "bx rdma: " + connection->peer() + ": " + device_->name() + " port " +
                     std::to_string(port_) + ", GID index " + std::to_string(address->gid_index) +
                     " " + verbs::FormatGidAddress(address->gid) + " (" + address->reason +
                     "), traffic class " + std::to_string(rc.traffic_class) + ", SL " +
                     std::to_string(rc.service_level));
  }
  rc.psn = mine.psn;
  rc.remote_psn = theirs.psn;
  rc.mtu = std::min({mine.mtu, theirs.mtu, IBV_MTU_4096});
  verbs::SetPath(*address, theirs.lid, theirs.gid, &rc);
  if (Status s = verbs::MoveRcToRts(lib, connection->qp(), port_, theirs.qp_num, theirs.gid, rc);
      !s.ok())
    return fail(s);
  if (peer_hello != nullptr) {
    if (Status s = SendAcceptingHello(fd, mine, secret, auth, deadline); !s.ok()) return fail(s);
    if (Status s = ReceiveReady(fd, timeout); !s.ok()) return fail(s);
  } else {
    if (Status s = SendReady(fd); !s.ok()) return fail(s);
  }
  io.Post([connection] { connection->Activate(); });
  return connection;
}

RdmaTransportInfo RdmaTransportImpl::Info() {
  RdmaTransportInfo info;
  info.io_threads = int(io_.threads().size());
  info.parent_domains = 0;
  for (auto& io : io_.threads()) {
    const engine::EnginePoller& poller = engine::EnginePoller::Of(*io);
    info.thread_domains += poller.td() != nullptr ? 1 : 0;
    info.parent_domains += poller.has_own_domain() ? 1 : 0;
    info.io_loop += io->counters();
  }
  info.port = port_;
  info.link_layer = LinkLayerName(default_address_.link_layer);
  info.gid_index = int(default_address_.gid_index);
  info.gid = verbs::FormatGidAddress(default_address_.gid);
  info.gid_reason = default_address_.reason;
  info.traffic_class = rdma_.traffic_class;
  info.service_level = rdma_.service_level;
  info.engines_created = engines_created_.load(std::memory_order_relaxed);
  info.peers_refused = peers_refused_.load(std::memory_order_relaxed);
  std::vector<std::shared_ptr<RdmaConnection>> connections;
  {
    std::lock_guard lock(mu_);
    for (auto& [raw, c] : connections_) connections.push_back(c);
  }
  for (auto& c : connections) {
    c->io().RunAndWait([&] {
      if (c->torn_down()) return;
      RdmaEngineInfo e;
      e.peer = c->peer();
      e.initiator = c->initiator();
      e.sockets = c->sockets();
      e.in_thread_domain = false;
      e.in_thread_domain = c->poller().has_own_domain() && c->qp()->pd == c->poller().pd();
      e.counters = c->Counters();
      ibv_qp_attr attr{};
      ibv_qp_init_attr init{};
      verbs::Library& lib = device_->lib();
      constexpr int kPath = IBV_QP_AV | IBV_QP_SQ_PSN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU;
      if (lib.query_qp != nullptr && lib.query_qp(c->qp(), &attr, kPath, &init) == 0) {
        e.send_psn = attr.sq_psn;
        e.receive_psn = attr.rq_psn;
        e.global = attr.ah_attr.is_global != 0;
        e.gid_index = attr.ah_attr.grh.sgid_index;
        e.traffic_class = attr.ah_attr.grh.traffic_class;
        e.service_level = attr.ah_attr.sl;
        e.remote_lid = attr.ah_attr.dlid;
        e.path_mtu = attr.path_mtu >= IBV_MTU_256 ? 128 << int(attr.path_mtu) : 0;
      }
      info.engines.push_back(std::move(e));
    });
  }
  return info;
}

Result<RdmaTransportInfo> GetRdmaTransportInfo(Transport& transport) {
  auto* rdma = dynamic_cast<RdmaTransportImpl*>(&transport);
  if (rdma == nullptr) return InvalidArgument("not an rdma:// transport");
  return rdma->Info();
}

}  // namespace bx::rdma

namespace bx::rdma {

Result<std::unique_ptr<Transport>> CreateRdmaTransport(const TransportOptions& options) {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<RdmaTransportImpl> t,
                      RdmaTransportImpl::Create(options, options.rdma));
  return std::unique_ptr<Transport>(std::move(t));
}

void RegisterRdmaTransport() {
  transport::RegisterTransport(
      "rdma", [](const TransportOptions& options) { return CreateRdmaTransport(options); });
}

}  // namespace bx::rdma
