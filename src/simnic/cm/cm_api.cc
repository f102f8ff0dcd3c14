// librdmacm's API over the CM agent (cm_internal.h). Errors as librdmacm reports them: -1 with
// errno set.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "simnic/cm/cm_internal.h"

using namespace bx::simnic::cm;

namespace {

int Fail(int error) {
  errno = error;
  return -1;
}

socklen_t AddressLength(const sockaddr* address) {
  return address->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

Channel* NewChannel(bool internal) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  auto* channel = new Channel();
  channel->pub.fd = fds[0];
  channel->write_fd = fds[1];
  channel->internal = internal;
  return channel;
}

void DeleteChannel(Channel* channel) {
  for (Event* event : channel->queue) delete event;
  channel->queue.clear();
  close(channel->pub.fd);
  if (channel->waiters.load() > 0) {
    // A thread still waits in rdma_get_cm_event (rping's event thread as its main thread tears
    // down): with the kernel's CM it stays blocked until the process ends, and so it does here,
    // on a pipe whose write end stays open.
    return;
  }
  close(channel->write_fd);
  delete channel;
}

Channel* ToChannel(rdma_event_channel* channel) {
  return reinterpret_cast<Channel*>(channel);
}

// A synchronous id (its own channel): waits for its next event; 0 when it is `expected`.
int AwaitEvent(Id* id, rdma_cm_event_type expected, rdma_cm_id** request = nullptr) {
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(&id->channel->pub, &event) != 0) return -1;
  const rdma_cm_event_type got = event->event;
  const int status = event->status;
  if (request != nullptr && got == RDMA_CM_EVENT_CONNECT_REQUEST) *request = event->id;
  rdma_ack_cm_event(event);
  if (got == expected) return 0;
  return Fail(status < 0 ? -status : ECONNREFUSED);
}

// Takes the id's RDMA CM port (port 0: a free one, as the kernel's CM picks at bind time): the
// socket bound to its name, listened on once rdma_listen is called. CmMutex held.
int ReservePort(Id* id) {
  sockaddr* address = &id->pub.route.addr.src_addr;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const bool any_port = PortOf(address) == 0;
  for (int attempt = 0;; ++attempt) {
    if (any_port) SetPort(address, EphemeralPort());
    sockaddr_un name;
    const socklen_t length = CmSocketAddress(address, &name);
    if (bind(fd, reinterpret_cast<sockaddr*>(&name), length) == 0) break;
    if (!any_port || errno != EADDRINUSE || attempt == 64) {
      const int error = errno;
      close(fd);
      if (any_port) SetPort(address, 0);
      return error;
    }
  }
  id->fd = fd;
  return 0;
}

// Creates the id's QP (and, as librdmacm does, CQs of its own when none are given) and moves it
// to INIT. CmMutex held.
int CreateQp(Id* id, ibv_qp_init_attr_ex* attr) {
  if (id->pub.verbs == nullptr || attr == nullptr) return EINVAL;
  ibv_qp_init_attr_ex init = *attr;
  if (init.qp_type == 0) init.qp_type = id->pub.qp_type;  // as librdmacm: the id's
  if (init.qp_type != IBV_QPT_RC) return EOPNOTSUPP;      // RC only (no UD service lookup)
  if (!(init.comp_mask & IBV_QP_INIT_ATTR_PD) || init.pd == nullptr) {
    init.pd = DefaultPd(id->pub.verbs);
    init.comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  if (init.send_cq == nullptr || init.recv_cq == nullptr) {
    id->pub.send_cq_channel = ibv_create_comp_channel(id->pub.verbs);
    id->pub.recv_cq_channel = ibv_create_comp_channel(id->pub.verbs);
    id->pub.send_cq = ibv_create_cq(id->pub.verbs, int(init.cap.max_send_wr) + 1, nullptr,
                                    id->pub.send_cq_channel, 0);
    id->pub.recv_cq = ibv_create_cq(id->pub.verbs, int(init.cap.max_recv_wr) + 1, nullptr,
                                    id->pub.recv_cq_channel, 0);
    if (id->pub.send_cq == nullptr || id->pub.recv_cq == nullptr) return ENOMEM;
    init.send_cq = id->pub.send_cq;
    init.recv_cq = id->pub.recv_cq;
    id->own_cqs = true;
  }
  ibv_qp* qp = ibv_create_qp_ex(id->pub.verbs, &init);
  if (qp == nullptr) return errno ? errno : ENOMEM;
  id->pub.qp = qp;
  id->pub.pd = init.pd;
  if (int error = MoveQpToInit(id); error != 0) {
    ibv_destroy_qp(qp);
    id->pub.qp = nullptr;
    return error;
  }
  attr->cap = init.cap;
  return 0;
}

// rdma_create_qp's attributes as rdma_create_qp_ex takes them.
ibv_qp_init_attr_ex ExtendedAttributes(const ibv_qp_init_attr& attr, ibv_pd* pd) {
  ibv_qp_init_attr_ex ex{};
  std::memcpy(&ex, &attr, sizeof(attr));  // ibv_qp_init_attr is ibv_qp_init_attr_ex's prefix
  ex.pd = pd;
  ex.comp_mask = pd ? IBV_QP_INIT_ATTR_PD : 0;
  return ex;
}

}  // namespace

extern "C" {

rdma_event_channel* rdma_create_event_channel(void) {
  Channel* channel = NewChannel(false);
  if (channel == nullptr) return nullptr;
  return &channel->pub;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  std::lock_guard<std::mutex> lock(CmMutex());
  DeleteChannel(ToChannel(channel));
}

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context,
                   rdma_port_space ps) {
  if (out == nullptr) return Fail(EINVAL);
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_IB) return Fail(EPROTONOSUPPORT);  // RC only
  auto* id = new Id();
  id->channel = channel ? ToChannel(channel) : NewChannel(true);
  if (id->channel == nullptr) {
    delete id;
    return Fail(EMFILE);
  }
  id->pub.channel = &id->channel->pub;
  id->pub.context = context;
  id->pub.ps = ps;
  id->pub.qp_type = IBV_QPT_RC;
  id->pub.port_num = 1;
  *out = &id->pub;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* cm_id) {
  std::lock_guard<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  CloseSocket(id);  // (a bound port's socket was never watched: unwatching it is a no-op)
  if (id->state == State::kListening) ForgetRequestsOf(id);
  // Events not yet taken go with it (the kernel drops them too); requests a listener had not
  // answered are refused when their socket closes.
  for (Event* event : id->channel->queue) {
    if (event->pub.id == cm_id || event->pub.listen_id == cm_id) event->dead = true;
  }
  if (id->channel->internal) DeleteChannel(id->channel);
  delete id;
  return 0;
}

int rdma_migrate_id(rdma_cm_id* cm_id, rdma_event_channel* channel) {
  std::lock_guard<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  Channel* target = channel ? ToChannel(channel) : NewChannel(true);
  if (target == nullptr) return Fail(EMFILE);
  // Its queued events move with it, in order.
  Channel* source = id->channel;
  for (auto it = source->queue.begin(); it != source->queue.end();) {
    if ((*it)->pub.id == cm_id && !(*it)->dead) {
      char byte;
      (void)!read(source->pub.fd, &byte, 1);
      target->queue.push_back(*it);
      (void)!write(target->write_fd, &byte, 1);
      it = source->queue.erase(it);
    } else {
      ++it;
    }
  }
  if (source->internal) DeleteChannel(source);
  id->channel = target;
  id->pub.channel = &target->pub;
  return 0;
}

int rdma_bind_addr(rdma_cm_id* cm_id, sockaddr* address) {
  if (address == nullptr || (address->sa_family != AF_INET && address->sa_family != AF_INET6)) {
    return Fail(EAFNOSUPPORT);
  }
  std::lock_guard<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  if (id->state != State::kIdle) return Fail(EINVAL);
  std::memcpy(&id->pub.route.addr.src_storage, address, AddressLength(address));
  if (int error = ReservePort(id); error != 0) {
    id->pub.route.addr.src_storage = sockaddr_storage();
    return Fail(error);
  }
  id->pub.verbs = DeviceContext();  // every local address is the simnic's
  id->state = State::kBound;
  return 0;
}

int rdma_listen(rdma_cm_id* cm_id, int backlog) {
  std::lock_guard<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  if (id->state != State::kBound) return Fail(EINVAL);
  if (listen(id->fd, backlog > 0 ? backlog : 16) != 0) return -1;
  id->state = State::kListening;
  WatchSocket(id);
  return 0;
}

int rdma_resolve_addr(rdma_cm_id* cm_id, sockaddr* source, sockaddr* destination, int) {
  if (destination == nullptr ||
      (destination->sa_family != AF_INET && destination->sa_family != AF_INET6)) {
    return Fail(EAFNOSUPPORT);
  }
  std::unique_lock<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  if (id->state != State::kIdle && id->state != State::kBound) return Fail(EINVAL);
  if (id->fd >= 0) {  // a port taken by rdma_bind_addr: an active id keeps only its number
    close(id->fd);
    id->fd = -1;
  }
  if (source != nullptr)
    std::memcpy(&id->pub.route.addr.src_storage, source, AddressLength(source));
  if (id->pub.route.addr.src_addr.sa_family == 0) {  // unbound: the loopback of its family
    id->pub.route.addr.src_addr.sa_family = destination->sa_family;
    if (destination->sa_family == AF_INET) {
      id->pub.route.addr.src_sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
      id->pub.route.addr.src_sin6.sin6_addr = in6addr_loopback;
    }
  }
  std::memcpy(&id->pub.route.addr.dst_storage, destination, AddressLength(destination));
  id->pub.verbs = DeviceContext();
  if (id->pub.verbs == nullptr) {
    PushEvent(id, RDMA_CM_EVENT_ADDR_ERROR, -ENODEV);
  } else {
    id->state = State::kAddrResolved;
    PushEvent(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
  }
  if (!id->channel->internal) return 0;
  lock.unlock();
  return AwaitEvent(id, RDMA_CM_EVENT_ADDR_RESOLVED);
}

int rdma_resolve_route(rdma_cm_id* cm_id, int) {
  std::unique_lock<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  if (id->state != State::kAddrResolved) return Fail(EINVAL);
  id->state = State::kRouteResolved;
  PushEvent(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  if (!id->channel->internal) return 0;
  lock.unlock();
  return AwaitEvent(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

int rdma_create_qp_ex(rdma_cm_id* cm_id, ibv_qp_init_attr_ex* attr) {
  std::lock_guard<std::mutex> lock(CmMutex());
  if (int error = CreateQp(ToId(cm_id), attr); error != 0) return Fail(error);
  return 0;
}

int rdma_create_qp(rdma_cm_id* cm_id, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (attr == nullptr) return Fail(EINVAL);
  ibv_qp_init_attr_ex ex = ExtendedAttributes(*attr, pd);
  if (rdma_create_qp_ex(cm_id, &ex) != 0) return -1;
  attr->cap = ex.cap;
  return 0;
}

void rdma_destroy_qp(rdma_cm_id* cm_id) {
  std::lock_guard<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  if (id->pub.qp != nullptr) ibv_destroy_qp(id->pub.qp);
  id->pub.qp = nullptr;
  if (id->own_cqs) {
    ibv_destroy_cq(id->pub.send_cq);
    ibv_destroy_cq(id->pub.recv_cq);
    ibv_destroy_comp_channel(id->pub.send_cq_channel);
    ibv_destroy_comp_channel(id->pub.recv_cq_channel);
    id->pub.send_cq = id->pub.recv_cq = nullptr;
    id->pub.send_cq_channel = id->pub.recv_cq_channel = nullptr;
    id->own_cqs = false;
  }
}

int rdma_connect(rdma_cm_id* cm_id, rdma_conn_param* param) {
  std::unique_lock<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  if (id->state != State::kRouteResolved) return Fail(EINVAL);
  if (int error = FillLocalEndpoint(id, param, kReqPrivateData); error != 0) return Fail(error);
  // The active side's own port, as the kernel's CM gives it one.
  if (PortOf(&id->pub.route.addr.src_addr) == 0) {
    SetPort(&id->pub.route.addr.src_addr, EphemeralPort());
  }
  std::memcpy(&id->local.source, &id->pub.route.addr.src_storage, sizeof(sockaddr_storage));
  std::memcpy(&id->local.destination, &id->pub.route.addr.dst_storage, sizeof(sockaddr_storage));
  sockaddr_un name;
  const socklen_t length = CmSocketAddress(&id->pub.route.addr.dst_addr, &name);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  // A local connect completes at once (or is refused: nothing listens at that port).
  if (connect(fd, reinterpret_cast<sockaddr*>(&name), length) != 0) {
    const int error = errno;
    close(fd);
    id->state = State::kDisconnected;
    if (error == ECONNREFUSED || error == ENOENT) {
      PushEvent(id, RDMA_CM_EVENT_REJECTED, kRejectInvalidServiceId);
    } else {
      PushEvent(id, RDMA_CM_EVENT_UNREACHABLE, -error);
    }
  } else {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    id->fd = fd;
    id->state = State::kConnecting;
    if (SendMessage(id, MessageType::kReq, &id->local)) {
      WatchSocket(id);
    } else {
      close(fd);
      id->fd = -1;
      id->state = State::kDisconnected;
      PushEvent(id, RDMA_CM_EVENT_UNREACHABLE, -ECONNRESET);
    }
  }
  if (!id->channel->internal) return 0;
  lock.unlock();
  return AwaitEvent(id, RDMA_CM_EVENT_ESTABLISHED);
}

int rdma_establish(rdma_cm_id* cm_id) {
  std::lock_guard<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  if (id->state != State::kResponded) return Fail(EINVAL);
  if (!SendMessage(id, MessageType::kRtu, nullptr)) return Fail(ECONNRESET);
  id->state = State::kEstablished;
  return 0;
}

int rdma_accept(rdma_cm_id* cm_id, rdma_conn_param* param) {
  std::unique_lock<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  if (id->state != State::kRequested) return Fail(EINVAL);
  const Endpoint remote = id->remote;
  if (int error = FillLocalEndpoint(id, param, kRepPrivateData); error != 0) return Fail(error);
  id->remote = remote;
  if (id->pub.qp != nullptr) {
    if (int error = MoveQpToRts(id); error != 0) return Fail(error);
  } else {
    // No QP on the id: the program's own, numbered in conn_param (and moved by it).
    id->local.responder_resources =
        std::min(id->local.responder_resources, id->remote.initiator_depth);
    id->local.initiator_depth = std::min(id->local.initiator_depth, id->remote.responder_resources);
  }
  if (!SendMessage(id, MessageType::kRep, &id->local)) return Fail(ECONNRESET);
  id->state = State::kAccepted;
  if (!id->channel->internal) return 0;
  lock.unlock();
  return AwaitEvent(id, RDMA_CM_EVENT_ESTABLISHED);
}

int rdma_reject(rdma_cm_id* cm_id, const void* private_data, uint8_t private_data_len) {
  std::lock_guard<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  if (id->state != State::kRequested) return Fail(EINVAL);
  if (private_data_len > kRejPrivateData) return Fail(EINVAL);
  Endpoint reason;
  reason.private_data_len = private_data_len;
  if (private_data_len) std::memcpy(reason.private_data, private_data, private_data_len);
  SendMessage(id, MessageType::kRej, &reason);
  CloseSocket(id);
  id->state = State::kDisconnected;
  return 0;
}

int rdma_disconnect(rdma_cm_id* cm_id) {
  std::lock_guard<std::mutex> lock(CmMutex());
  Id* id = ToId(cm_id);
  MoveQpToError(id);  // as the kernel's CM does, before anything else
  switch (id->state) {
    case State::kEstablished:
    case State::kAccepted:
    case State::kResponded:
      if (SendMessage(id, MessageType::kDreq, nullptr)) {
        id->state = State::kDisconnecting;
      } else {
        CloseSocket(id);
        id->state = State::kDisconnected;
        PushEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      }
      return 0;
    case State::kDisconnecting:
    case State::kDisconnected:
      return 0;  // the peer's DREQ came first: its DISCONNECTED is already queued
    default:
      return Fail(EINVAL);
  }
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
  Id* listener = ToId(listen);
  if (!listener->channel->internal) return Fail(EINVAL);
  rdma_cm_id* request = nullptr;
  if (AwaitEvent(listener, RDMA_CM_EVENT_CONNECT_REQUEST, &request) != 0) return -1;
  std::lock_guard<std::mutex> lock(CmMutex());
  Id* id = ToId(request);
  // A synchronous listener's requests are synchronous too, each on its own channel.
  id->channel = NewChannel(true);
  id->pub.channel = &id->channel->pub;
  if (listener->request_qp) {  // the QP its synchronous listener asked for (rdma_create_ep)
    ibv_qp_init_attr_ex attr = ExtendedAttributes(listener->request_qp_attr, listener->request_pd);
    if (int error = CreateQp(id, &attr); error != 0) return Fail(error);
  }
  *out = request;
  return 0;
}

int rdma_get_cm_event(rdma_event_channel* pub, rdma_cm_event** out) {
  Channel* channel = ToChannel(pub);
  for (;;) {
    char byte;
    channel->waiters.fetch_add(1);
    const ssize_t n = read(channel->pub.fd, &byte, 1);
    channel->waiters.fetch_sub(1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;  // EAGAIN when the program made the fd non-blocking
    if (n == 0) return Fail(ENODATA);
    std::lock_guard<std::mutex> lock(CmMutex());
    if (channel->queue.empty()) continue;
    Event* event = channel->queue.front();
    channel->queue.pop_front();
    if (event->dead) {
      delete event;
      continue;
    }
    Id* id = ToId(event->pub.id);
    id->pub.event = &event->pub;
    *out = &event->pub;
    return 0;
  }
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return Fail(EINVAL);
  delete reinterpret_cast<Event*>(event);
  return 0;
}

int rdma_init_qp_attr(rdma_cm_id* cm_id, ibv_qp_attr* attr, int* mask) {
  std::lock_guard<std::mutex> lock(CmMutex());
  if (int error = QpAttributes(ToId(cm_id), attr, mask); error != 0) return Fail(error);
  return 0;
}

int rdma_create_ep(rdma_cm_id** out, rdma_addrinfo* info, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (out == nullptr || info == nullptr) return Fail(EINVAL);
  rdma_cm_id* cm_id = nullptr;
  if (rdma_create_id(nullptr, &cm_id, nullptr,
                     info->ai_port_space ? rdma_port_space(info->ai_port_space) : RDMA_PS_TCP)) {
    return -1;
  }
  int rc = 0;
  if (info->ai_flags & RAI_PASSIVE) {
    rc = rdma_bind_addr(cm_id, info->ai_src_addr);
    if (rc == 0 && attr != nullptr) {  // each request gets a QP like this
      std::lock_guard<std::mutex> lock(CmMutex());
      Id* id = ToId(cm_id);
      id->request_qp = true;
      id->request_qp_attr = *attr;
      id->request_pd = pd;
    }
  } else {
    rc = rdma_resolve_addr(cm_id, info->ai_src_addr, info->ai_dst_addr, 2000);
    if (rc == 0) rc = rdma_resolve_route(cm_id, 2000);
    if (rc == 0 && attr != nullptr) rc = rdma_create_qp(cm_id, pd, attr);
  }
  if (rc != 0) {
    const int error = errno;
    rdma_destroy_id(cm_id);
    return Fail(error);
  }
  *out = cm_id;
  return 0;
}

void rdma_destroy_ep(rdma_cm_id* cm_id) {
  rdma_destroy_qp(cm_id);
  rdma_destroy_id(cm_id);
}

int rdma_set_option(rdma_cm_id*, int level, int optname, void*, size_t) {
  // Type of service, address reuse, IPv6-only and the ACK timeout change nothing on the simnic.
  if (level == RDMA_OPTION_ID && optname >= RDMA_OPTION_ID_TOS &&
      optname <= RDMA_OPTION_ID_ACK_TIMEOUT) {
    return 0;
  }
  return Fail(ENOSYS);
}

int rdma_notify(rdma_cm_id*, ibv_event_type) {
  return 0;
}

int rdma_create_srq(rdma_cm_id* cm_id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  std::lock_guard<std::mutex> lock(CmMutex());
  if (cm_id->verbs == nullptr || attr == nullptr) return Fail(EINVAL);
  ibv_srq* srq = ibv_create_srq(pd ? pd : DefaultPd(cm_id->verbs), attr);
  if (srq == nullptr) return -1;
  cm_id->srq = srq;
  return 0;
}

void rdma_destroy_srq(rdma_cm_id* cm_id) {
  std::lock_guard<std::mutex> lock(CmMutex());
  if (cm_id->srq != nullptr) ibv_destroy_srq(cm_id->srq);
  cm_id->srq = nullptr;
}

int rdma_reject_ece(rdma_cm_id* cm_id, const void* private_data, uint8_t private_data_len) {
  return rdma_reject(cm_id, private_data, private_data_len);
}

// Not on the simnic: multicast groups, enhanced connection establishment (a vendor option) and
// extended SRQs; a program that needs them fails here rather than in the real librdmacm, which
// would find no kernel CM.
int rdma_create_srq_ex(rdma_cm_id*, ibv_srq_init_attr_ex*) {
  return Fail(ENOSYS);
}
int rdma_join_multicast(rdma_cm_id*, sockaddr*, void*) {
  return Fail(ENOSYS);
}
int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) {
  return Fail(ENOSYS);
}
int rdma_leave_multicast(rdma_cm_id*, sockaddr*) {
  return Fail(ENOSYS);
}
int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) {
  return Fail(ENOSYS);
}
int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) {
  return Fail(ENOSYS);
}

__be16 rdma_get_src_port(rdma_cm_id* cm_id) {
  const rdma_addr& a = cm_id->route.addr;
  return a.src_addr.sa_family == AF_INET6 ? a.src_sin6.sin6_port : a.src_sin.sin_port;
}

__be16 rdma_get_dst_port(rdma_cm_id* cm_id) {
  const rdma_addr& a = cm_id->route.addr;
  return a.dst_addr.sa_family == AF_INET6 ? a.dst_sin6.sin6_port : a.dst_sin.sin_port;
}

ibv_context** rdma_get_devices(int* count) {
  ibv_context* context = nullptr;
  {
    std::lock_guard<std::mutex> lock(CmMutex());
    context = DeviceContext();
  }
  auto** list = new ibv_context* [2] { context, nullptr };
  if (count != nullptr) *count = context ? 1 : 0;
  return list;
}

void rdma_free_devices(ibv_context** list) {
  delete[] list;
}

const char* rdma_event_str(rdma_cm_event_type event) {
  static const char* const names[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",  "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",     "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  const auto index = size_t(event);
  return index < sizeof(names) / sizeof(names[0]) ? names[index] : "UNKNOWN EVENT";
}

}  // extern "C"
