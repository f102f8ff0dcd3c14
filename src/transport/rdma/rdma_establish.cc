// An engine's set-up over its bootstrap connection (bootstrap.h has the messages), one explicit
// sequence per side. Both start with PrepareLocalEnd; then
//   connecting: ConnectingHandshake (our Hello, the peer's), Register, link-layer check,
//               ConnectQueuePair, Ready to the peer, Activate;
//   accepting:  (the listener already has the peer's Hello) Register, link-layer check,
//               ConnectQueuePair, our Hello to the peer, its Ready, Activate.
// The accepting side's QP is in RTS before the peer learns its number, and the connecting
// side's before it says Ready: only then may the other side send.
#include <sys/socket.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <random>

#include "base/log_internal.h"
#include "bx/log.h"
#include "transport/rdma/rdma_environment.h"
#include "transport/rdma/rdma_transport_impl.h"
#include "verbs/port_address.h"
#include "verbs/rc_connect.h"

namespace bx::rdma {
namespace {

// Inline capacity asked of the QP: the engine's control payloads go inline (engine/wire.h).
constexpr uint32_t kInlineBytes = engine::kMaxInlinePayloadBytes;

// A random 24-bit first PSN per connection, as rdma_cm picks one: a stale packet of an earlier
// connection between the same QP numbers then cannot fall into the new one's window.
uint32_t RandomPsn() {
  thread_local std::mt19937 generator{std::random_device{}()};
  return generator() & 0xffffff;
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

// Peers on different link layers cannot reach each other; each side says so.
Status LinkLayersMatch(const Hello& mine, const Hello& theirs) {
  if (theirs.link_layer == mine.link_layer) return Status::Ok();
  return FailedPrecondition("rdma: the peer's port is " +
                            std::string(LinkLayerName(theirs.link_layer)) + ", ours is " +
                            std::string(LinkLayerName(mine.link_layer)) +
                            ": an InfiniBand port and a RoCE port cannot reach each other");
}

}  // namespace

std::string_view LinkLayerName(uint8_t link_layer) {
  return link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "Ethernet (RoCE)";
}

// Our end of a connection being set up, from PrepareLocalEnd to Activate.
struct RdmaTransportImpl::LocalEnd {
  std::shared_ptr<RdmaConnection> connection;  // owns the QP, the engine and the bootstrap fd
  int fd = -1;                                 // the bootstrap socket, the connection's
  verbs::PortAddress address;                  // how the peer reaches our QP
  verbs::RcOptions rc;                         // the QP's path settings so far
  Hello mine;
};

Result<RdmaTransportImpl::LocalEnd> RdmaTransportImpl::PrepareLocalEnd(
    UniqueFd fd, std::string peer, std::shared_ptr<AcceptState> accept, transport::PeerSlot slot,
    bool privileged_peer) {
  engines_created_.fetch_add(1, std::memory_order_relaxed);
  verbs::Library& lib = device_->lib();
  const auto& threads = io_.threads();
  size_t index = next_io_.fetch_add(1, std::memory_order_relaxed) % threads.size();
  const std::shared_ptr<IoThread>& io_thread = threads[index];
  engine::EnginePoller& poller = engine::EnginePoller::Of(*io_thread);
  LocalEnd end;
  end.connection =
      std::make_shared<RdmaConnection>(*this, io_thread, std::move(peer), std::move(accept));
  end.connection->HoldPeerSlot(std::move(slot));
  if (privileged_peer) end.connection->MarkPrivilegedPeer();
  const engine::EngineConfig config = EngineConfigOf(rdma_);
  verbs::QueuePairAttrs attrs;
  attrs.max_send_wr = config.send_queue_depth;
  attrs.max_recv_wr = config.recv_queue_depth;
  attrs.max_inline_data = kInlineBytes;
  auto qp = verbs::CreateRcQueuePair(lib, device_->context(), poller.pd(), attrs, poller.cq());
  if (!qp.ok()) return qp.status();
  const std::optional<sockaddr_storage> local = LocalAddress(fd.get());
  auto address = verbs::ResolvePortAddress(
      *device_, port_, local ? reinterpret_cast<const sockaddr*>(&*local) : nullptr,
      rdma_.gid_index);
  if (!address.ok()) return address.status();
  end.address = *address;
  end.rc.timeout = rdma_.timeout;
  end.rc.retry_cnt = rdma_.retry_cnt;
  end.rc.rnr_retry = rdma_.rnr_retry;
  end.rc.traffic_class = rdma_.traffic_class;
  end.rc.service_level = rdma_.service_level;
  BX_RETURN_IF_ERROR(verbs::MoveRcToInit(lib, qp->qp(), port_, end.rc));
  engine::EngineConfig engine_config = config;
  engine_config.max_message_bytes = options_.max_message_bytes;
  auto engine = std::make_unique<engine::Engine>(lib, qp->qp(), engine_config,
                                                 end.connection->EngineCallbacks());
  // Receives are posted before the peer learns our QP number: no request can find none (RNR).
  BX_RETURN_IF_ERROR(engine->PostInitialReceives());
  const uint32_t qpn = qp->qp_num();
  // From here on the connection owns the fd and closes it however set-up ends.
  end.fd = fd.get();
  end.connection->Attach(std::move(qp).value(), std::move(engine), fd.release());

  end.mine.qp_num = qpn;
  end.mine.gid = end.address.gid;
  end.mine.lid = end.address.lid;
  end.mine.link_layer = end.address.link_layer;
  end.mine.mtu = end.address.active_mtu;
  end.mine.psn = RandomPsn();
  end.mine.recv_queue_depth = config.recv_queue_depth;
  end.mine.eager_limit = config.eager_limit;
  end.mine.max_message_bytes = options_.max_message_bytes;
  return end;
}

void RdmaTransportImpl::Register(LocalEnd& end, const Hello& theirs) {
  RdmaConnection& connection = *end.connection;
  connection.engine().SetPeer(
      {theirs.recv_queue_depth, theirs.eager_limit, theirs.max_message_bytes});
  // Registered with the I/O thread before the peer can send.
  connection.io().RunAndWait([&] { connection.Register(); });
  std::lock_guard lock(mu_);
  connections_[end.connection.get()] = end.connection;
}

Status RdmaTransportImpl::ConnectQueuePair(LocalEnd& end, const Hello& theirs) {
  if (DebugAddressing()) {
    // Asked for with BX_DEBUG=1: to the sink, or to stderr when the program has none.
    LogRequested(LogLevel::kDebug, "bx rdma: " + end.connection->peer() + ": " + device_->name() +
                                       " port " + std::to_string(port_) + ", GID index " +
                                       std::to_string(end.address.gid_index) + " " +
                                       verbs::FormatGidAddress(end.address.gid) + " (" +
                                       end.address.reason + "), traffic class " +
                                       std::to_string(end.rc.traffic_class) + ", SL " +
                                       std::to_string(end.rc.service_level));
  }
  verbs::RcOptions& rc = end.rc;
  rc.psn = end.mine.psn;
  rc.remote_psn = theirs.psn;
  rc.mtu = std::min({end.mine.mtu, theirs.mtu, IBV_MTU_4096});
  verbs::SetPath(end.address, theirs.lid, theirs.gid, &rc);
  return verbs::MoveRcToRts(device_->lib(), end.connection->qp(), port_, theirs.qp_num, theirs.gid,
                            rc);
}

Status RdmaTransportImpl::Fail(LocalEnd& end, const Status& why) {
  RdmaConnection& connection = *end.connection;
  connection.io().RunAndWait([&] { connection.Teardown(why); });
  return why;
}

std::shared_ptr<RdmaConnection> RdmaTransportImpl::Activate(LocalEnd& end) {
  std::shared_ptr<RdmaConnection> connection = std::move(end.connection);
  connection->io().Post([connection] { connection->Activate(); });
  return connection;
}

Result<std::shared_ptr<RdmaConnection>> RdmaTransportImpl::EstablishConnecting(
    UniqueFd fd, std::string peer, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  BX_ASSIGN_OR_RETURN(LocalEnd end, PrepareLocalEnd(std::move(fd), peer, nullptr, {}, false));
  // Our Hello out, the peer's back once its QP is in RTS. Failing here, the connection was
  // never registered: dropping it closes the fd.
  BX_ASSIGN_OR_RETURN(const Hello theirs,
                      ConnectingHandshake(end.fd, end.mine, transport::auth::ProvenSecret(options_),
                                          peer, deadline));
  Register(end, theirs);
  if (Status s = LinkLayersMatch(end.mine, theirs); !s.ok()) return Fail(end, s);
  if (Status s = ConnectQueuePair(end, theirs); !s.ok()) return Fail(end, s);
  if (Status s = SendReady(end.fd); !s.ok()) return Fail(end, s);
  return Activate(end);
}

Result<std::shared_ptr<RdmaConnection>> RdmaTransportImpl::EstablishAccepting(
    UniqueFd fd, std::string peer, const Hello& peer_hello, std::shared_ptr<AcceptState> accept,
    std::chrono::milliseconds timeout, const AcceptedAuth* auth, transport::PeerSlot slot) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool privileged = auth != nullptr && auth->privileged;
  BX_ASSIGN_OR_RETURN(LocalEnd end,
                      PrepareLocalEnd(std::move(fd), std::move(peer), std::move(accept),
                                      std::move(slot), privileged));
  // We prove the secret the peer proved.
  const std::string& secret = privileged ? options_.privileged_secret : options_.auth_secret;
  Register(end, peer_hello);
  if (Status s = LinkLayersMatch(end.mine, peer_hello); !s.ok()) {
    // We still answer with our Hello, so the peer can say the same.
    (void)SendAcceptingHello(end.fd, end.mine, secret, auth, deadline);
    return Fail(end, s);
  }
  if (Status s = ConnectQueuePair(end, peer_hello); !s.ok()) return Fail(end, s);
  if (Status s = SendAcceptingHello(end.fd, end.mine, secret, auth, deadline); !s.ok())
    return Fail(end, s);
  if (Status s = ReceiveReady(end.fd, timeout); !s.ok()) return Fail(end, s);
  return Activate(end);
}

}  // namespace bx::rdma
