// The rdma:// transport itself: its creation on bemalloc's device, Listen, Connect, Info and its
// registration. The rest of RdmaTransportImpl is in rdma_connection_pool.cc (the connecting
// side's engines) and rdma_establish.cc (an engine's set-up); the listener is rdma_listener.cc
// and the environment variables rdma_environment.cc.
#include "transport/rdma/rdma_transport.h"

#include <algorithm>
#include <mutex>

#include "alloc/verbs_registrar.h"
#include "base/cpu_list.h"
#include "base/loop_tasks.h"
#include "bx/bemalloc.h"
#include "transport/rdma/rdma_environment.h"
#include "transport/rdma/rdma_listener.h"
#include "transport/rdma/rdma_transport_impl.h"
#include "transport/socket_util.h"
#include "transport/transport_registry.h"
#include "verbs/device_choice.h"
#include "verbs/port_address.h"

namespace bx::rdma {
namespace {

constexpr int kListenBacklog = 4096;

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
  auto cpus = IoCpusFromEnvironment(options.io_cpus);
  if (!cpus.ok()) return cpus.status().WithContext("rdma transport");
  const std::string_view request =
      options.device.empty() ? verbs::DeviceRequestFromEnvironment() : options.device;
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
      auto device =
          verbs::OpenChosenDevice(request, *cpus, std::max(1, options.io_threads), &t->choice_);
      if (!device.ok()) return device.status().WithContext("rdma transport");
      t->device_ = new verbs::Device(std::move(device).value());  // lives as long as bemalloc
      BX_RETURN_IF_ERROR(bemalloc::Init(*t->device_));
    } else {
      BX_RETURN_IF_ERROR(t->ChooseOnRegisteredDevice(request, *cpus));
    }
  }
  auto port = t->choice_.port != 0 ? verbs::CheckPortActive(*t->device_, t->choice_.port)
                                   : verbs::FirstActivePort(*t->device_);
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
  io_options.cpus = std::move(cpus).value();
  BX_ASSIGN_OR_RETURN(t->io_, IoThreadSet::Acquire(*t->device_, io_options, options.io_threads,
                                                   t->rdma_.share_io_threads));
  return t;
}

Status RdmaTransportImpl::ChooseOnRegisteredDevice(std::string_view request,
                                                   const std::vector<int>& cpus) {
  // The process's device is fixed; what this transport's threads would prefer is still worth
  // reporting, and a request that excludes the device is refused as before.
  auto choice =
      verbs::ChooseDevice(device_->lib(), request, cpus, std::max(1, options_.io_threads));
  const verbs::DeviceChoice process = verbs::ProcessChoice();
  if (!choice.ok() || choice->device != device_->name()) {
    if (!options_.device.empty() && (!choice.ok() || request.find(',') == std::string::npos))
      return FailedPrecondition("rdma transport: bemalloc registers on " + device_->name() +
                                ", cannot run on " + options_.device);
    choice_.device = device_->name();
    choice_.reason =
        "bemalloc registers on it (" +
        (process.device == device_->name() ? process.reason : "opened by the program") +
        "); one device per process";
    if (choice.ok()) choice_.io_threads = choice->io_threads;
    return Status::Ok();
  }
  choice_ = *choice;
  if (process.device == device_->name() && request.empty()) choice_.reason = process.reason;
  return Status::Ok();
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
  info.device = device_->name();
  info.device_reason = choice_.reason;
  for (const verbs::IoThreadPlacement& p : choice_.io_threads)
    info.io_thread_devices.push_back({p.cpu, p.node, p.preferred});
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
