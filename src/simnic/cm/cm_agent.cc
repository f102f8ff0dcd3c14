// The CM agent: one thread that reads every CM socket of the process and turns the peer CM's
// messages into state changes and events (cm_internal.h), and the QP transitions they imply.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "simnic/cm/cm_internal.h"

namespace bx::simnic::cm {
namespace {

struct Header {
  uint32_t magic;
  uint8_t type;
  uint8_t pad[3];
  uint32_t length;
};
constexpr uint32_t kMagic = 0x4d435842;  // "BXCM"

struct Agent {
  int epoll_fd = -1;
  std::unordered_map<int, Id*> sockets;  // fd -> its id (CmMutex)
};

Agent& TheAgent();

// The peer's CM went away (its process ended, or it destroyed the id): what the kernel's CM
// reports for the state the connection was in.
void OnPeerGone(Id* id) {
  const State state = id->state;
  CloseSocket(id);
  switch (state) {
    case State::kConnecting:
      id->state = State::kDisconnected;
      PushEvent(id, RDMA_CM_EVENT_UNREACHABLE, -ECONNRESET);
      break;
    case State::kAccepted:
    case State::kResponded:
      id->state = State::kDisconnected;
      PushEvent(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET);
      break;
    case State::kEstablished:
    case State::kDisconnecting:
      id->state = State::kDisconnected;
      PushEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      break;
    case State::kRequested:
      if (!id->announced) delete id;  // the program never saw it
      break;
    default:
      break;  // already over: nothing to report
  }
}

void OnMessage(Id* id, MessageType type, const Endpoint& endpoint) {
  switch (type) {
    case MessageType::kReq: {  // on an accepted socket: a new request id for the listener
      if (id->state != State::kRequested || id->listener == nullptr) return OnPeerGone(id);
      id->remote = endpoint;
      // Its route: the address the client addressed, and the client's.
      std::memcpy(&id->pub.route.addr.src_storage, &endpoint.destination, sizeof(sockaddr_storage));
      std::memcpy(&id->pub.route.addr.dst_storage, &endpoint.source, sizeof(sockaddr_storage));
      id->announced = true;
      PushEvent(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &endpoint, id->listener);
      return;
    }
    case MessageType::kRep:
      if (id->state != State::kConnecting) return OnPeerGone(id);
      id->remote = endpoint;
      if (id->pub.qp == nullptr) {  // the program completes it with rdma_establish
        id->state = State::kResponded;
        PushEvent(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &endpoint);
        return;
      }
      if (int err = MoveQpToRts(id); err != 0) {
        SendMessage(id, MessageType::kRej, nullptr);
        CloseSocket(id);
        id->state = State::kDisconnected;
        PushEvent(id, RDMA_CM_EVENT_CONNECT_ERROR, -err);
        return;
      }
      SendMessage(id, MessageType::kRtu, nullptr);
      id->state = State::kEstablished;
      PushEvent(id, RDMA_CM_EVENT_ESTABLISHED, 0, &endpoint);
      return;
    case MessageType::kRtu:
      if (id->state != State::kAccepted) return;
      id->state = State::kEstablished;
      PushEvent(id, RDMA_CM_EVENT_ESTABLISHED, 0);
      return;
    case MessageType::kRej: {
      const State state = id->state;
      CloseSocket(id);
      id->state = State::kDisconnected;
      if (state == State::kConnecting) {
        PushEvent(id, RDMA_CM_EVENT_REJECTED, kRejectConsumer, &endpoint);
      } else if (state == State::kAccepted) {
        PushEvent(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNREFUSED);
      }
      return;
    }
    case MessageType::kDreq:
      if (id->state != State::kEstablished && id->state != State::kDisconnecting) return;
      SendMessage(id, MessageType::kDrep, nullptr);
      CloseSocket(id);
      id->state = State::kDisconnected;
      PushEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      return;
    case MessageType::kDrep:
      if (id->state != State::kDisconnecting) return;
      CloseSocket(id);
      id->state = State::kDisconnected;
      PushEvent(id, RDMA_CM_EVENT_DISCONNECTED, 0);
      return;
  }
}

// A request arrived at a listener: a new id, on the listener's channel, holds its socket until
// the REQ itself is read.
void OnAccept(Id* listener) {
  const int fd = accept4(listener->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  auto* id = new Id();
  id->pub.channel = &listener->channel->pub;
  id->channel = listener->channel;
  id->pub.context = listener->pub.context;
  id->pub.ps = listener->pub.ps;
  id->pub.qp_type = listener->pub.qp_type;
  id->pub.port_num = 1;
  id->pub.verbs = DeviceContext();
  id->listener = listener;
  id->state = State::kRequested;
  id->fd = fd;
  WatchSocket(id);
}

// Reads what fd has; handles every whole message.
void OnReadable(Id* id) {
  char buffer[4096];
  bool ended = false;  // EOF or an error: handled after the messages that came before it
  for (;;) {
    const ssize_t n = read(id->fd, buffer, sizeof(buffer));
    if (n > 0) {
      id->inbox.append(buffer, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    ended = !(n < 0 && errno == EAGAIN);
    break;
  }
  while (id->inbox.size() >= sizeof(Header) && id->fd >= 0) {
    Header header;
    std::memcpy(&header, id->inbox.data(), sizeof(header));
    if (header.magic != kMagic || header.length > sizeof(Endpoint)) return OnPeerGone(id);
    if (id->inbox.size() < sizeof(header) + header.length) break;
    Endpoint endpoint;
    std::memcpy(&endpoint, id->inbox.data() + sizeof(header), header.length);
    id->inbox.erase(0, sizeof(header) + header.length);
    OnMessage(id, MessageType(header.type), endpoint);
  }
  if (ended && id->fd >= 0) OnPeerGone(id);
}

void Run(Agent* agent) {
  epoll_event events[64];
  for (;;) {
    const int n = epoll_wait(agent->epoll_fd, events, 64, -1);
    std::lock_guard<std::mutex> lock(CmMutex());
    for (int i = 0; i < n; ++i) {
      auto it = agent->sockets.find(events[i].data.fd);
      if (it == agent->sockets.end()) continue;  // closed since
      Id* id = it->second;
      if (id->state == State::kListening) {
        OnAccept(id);
      } else {
        OnReadable(id);
      }
    }
  }
}

Agent& TheAgent() {
  // Never destroyed: its thread runs until the process ends.
  static Agent* agent = [] {
    auto* a = new Agent();
    a->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    std::thread([a] { Run(a); }).detach();
    return a;
  }();
  return *agent;
}

}  // namespace

void CloseSocket(Id* id) {
  if (id->fd < 0) return;
  UnwatchSocket(id);
  close(id->fd);
  id->fd = -1;
}

uint16_t EphemeralPort() {
  static std::mt19937 random(std::random_device{}());
  return uint16_t(32768 + random() % 28232);  // 32768-60999, Linux's default range
}

uint16_t PortOf(const sockaddr* address) {
  const auto* in = reinterpret_cast<const sockaddr_in*>(address);
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
  return ntohs(address->sa_family == AF_INET6 ? in6->sin6_port : in->sin_port);
}

void SetPort(sockaddr* address, uint16_t port) {
  if (address->sa_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(address)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(address)->sin_port = htons(port);
  }
}

socklen_t CmSocketAddress(const sockaddr* address, sockaddr_un* out) {
  *out = sockaddr_un();
  out->sun_family = AF_UNIX;
  // Abstract (a leading NUL): nothing on disk, gone with the socket.
  const int n = std::snprintf(out->sun_path + 1, sizeof(out->sun_path) - 1, "bxsim-cm.%u",
                              unsigned(PortOf(address)));
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
}

std::mutex& CmMutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

void WatchSocket(Id* id) {
  Agent& agent = TheAgent();
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = id->fd;
  epoll_ctl(agent.epoll_fd, EPOLL_CTL_ADD, id->fd, &event);
  agent.sockets[id->fd] = id;
}

void UnwatchSocket(Id* id) {
  Agent& agent = TheAgent();
  epoll_ctl(agent.epoll_fd, EPOLL_CTL_DEL, id->fd, nullptr);
  agent.sockets.erase(id->fd);
}

void ForgetRequestsOf(Id* listener) {
  std::vector<Id*> requests;
  for (auto& [fd, id] : TheAgent().sockets) {
    if (id->listener == listener) requests.push_back(id);
  }
  for (Id* id : requests) {
    id->listener = nullptr;
    if (id->announced) continue;
    CloseSocket(id);
    delete id;
  }
}

bool SendMessage(Id* id, MessageType type, const Endpoint* endpoint) {
  if (id->fd < 0) return false;
  char buffer[sizeof(Header) + sizeof(Endpoint)];
  Header header{kMagic, uint8_t(type), {}, endpoint ? uint32_t(sizeof(Endpoint)) : 0};
  std::memcpy(buffer, &header, sizeof(header));
  if (endpoint) std::memcpy(buffer + sizeof(header), endpoint, sizeof(Endpoint));
  size_t sent = 0, total = sizeof(header) + header.length;
  while (sent < total) {  // a few hundred bytes on a fresh socket: the buffer takes them at once
    const ssize_t n = send(id->fd, buffer + sent, total - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += size_t(n);
  }
  return true;
}

void PushEvent(Id* id, rdma_cm_event_type type, int status, const Endpoint* peer, Id* listen_id) {
  Channel* channel = id->channel;
  auto* event = new Event();
  event->pub.id = &id->pub;
  event->pub.listen_id = listen_id ? &listen_id->pub : nullptr;
  event->pub.event = type;
  event->pub.status = status;
  if (peer != nullptr) {
    rdma_conn_param& conn = event->pub.param.conn;
    std::memcpy(event->private_data, peer->private_data, peer->private_data_len);
    conn.private_data = peer->private_data_len ? event->private_data : nullptr;
    conn.private_data_len = peer->private_data_len;
    conn.responder_resources = peer->responder_resources;
    conn.initiator_depth = peer->initiator_depth;
    conn.flow_control = peer->flow_control;
    conn.retry_count = peer->retry_count;
    conn.rnr_retry_count = peer->rnr_retry_count;
    conn.srq = peer->srq;
    conn.qp_num = peer->qp_num;
  }
  channel->queue.push_back(event);
  const char byte = 1;
  while (write(channel->write_fd, &byte, 1) < 0 && errno == EINTR) {
  }
}

ibv_context* DeviceContext() {
  static ibv_context* context = [] {
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    ibv_context* opened = nullptr;
    for (int i = 0; list != nullptr && i < count && opened == nullptr; ++i) {
      if (std::strncmp(ibv_get_device_name(list[i]), "bxsim", 5) == 0) {
        opened = ibv_open_device(list[i]);
      }
    }
    if (list != nullptr) ibv_free_device_list(list);
    return opened;
  }();
  return context;
}

ibv_pd* DefaultPd(ibv_context* context) {
  static ibv_pd* pd = context ? ibv_alloc_pd(context) : nullptr;
  return pd;
}

int FillLocalEndpoint(Id* id, const rdma_conn_param* param, uint8_t max_private_data) {
  Endpoint& local = id->local;
  local = Endpoint();
  static std::mt19937 random(std::random_device{}());
  local.psn = random() & 0xffffff;
  local.qp_num = id->pub.qp ? id->pub.qp->qp_num : (param ? param->qp_num : 0);
  ibv_context* context = id->pub.verbs ? id->pub.verbs : DeviceContext();
  ibv_gid gid{};
  if (context != nullptr && ibv_query_gid(context, 1, 0, &gid) == 0) {
    std::memcpy(local.gid, gid.raw, sizeof(local.gid));
  }
  ibv_port_attr port{};
  if (context != nullptr && ibv_query_port(context, 1, &port) == 0) local.lid = port.lid;
  ibv_device_attr device{};
  if (context != nullptr && ibv_query_device(context, &device) == 0) {
    local.responder_resources = uint8_t(std::min(device.max_qp_rd_atom, 255));
    local.initiator_depth = uint8_t(std::min(device.max_qp_init_rd_atom, 255));
  }
  if (param != nullptr) {
    if (param->private_data_len > max_private_data) return EINVAL;
    // As librdmacm does: never more than the device allows.
    local.responder_resources = std::min(local.responder_resources, param->responder_resources);
    local.initiator_depth = std::min(local.initiator_depth, param->initiator_depth);
    local.retry_count = std::min<uint8_t>(param->retry_count, 7);
    local.rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
    local.flow_control = param->flow_control;
    local.srq = param->srq;
    local.private_data_len = param->private_data_len;
    if (param->private_data_len) {
      std::memcpy(local.private_data, param->private_data, param->private_data_len);
    }
  }
  return 0;
}

int QpAttributes(Id* id, ibv_qp_attr* attr, int* mask) {
  const ibv_qp_state state = attr->qp_state;
  *attr = ibv_qp_attr();
  attr->qp_state = state;
  switch (state) {
    case IBV_QPS_INIT:
      attr->pkey_index = 0;
      attr->port_num = 1;
      attr->qp_access_flags = unsigned(IBV_ACCESS_LOCAL_WRITE) | IBV_ACCESS_REMOTE_WRITE;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      return 0;
    case IBV_QPS_RTR: {
      ibv_port_attr port{};
      if (id->pub.verbs == nullptr || ibv_query_port(id->pub.verbs, 1, &port) != 0) return ENODEV;
      attr->path_mtu = port.active_mtu;
      attr->dest_qp_num = id->remote.qp_num;
      attr->rq_psn = id->remote.psn;
      // Reads and atomics from the peer only when this side offered to serve them (as the
      // kernel's CM sets the access flags at RTR from the responder resources).
      attr->max_dest_rd_atomic = id->local.responder_resources;
      attr->qp_access_flags = unsigned(IBV_ACCESS_LOCAL_WRITE) | IBV_ACCESS_REMOTE_WRITE;
      if (attr->max_dest_rd_atomic > 0) {
        attr->qp_access_flags |= unsigned(IBV_ACCESS_REMOTE_READ) | IBV_ACCESS_REMOTE_ATOMIC;
      }
      attr->min_rnr_timer = 12;
      attr->ah_attr.is_global = 1;
      std::memcpy(attr->ah_attr.grh.dgid.raw, id->remote.gid, sizeof(id->remote.gid));
      attr->ah_attr.grh.sgid_index = 0;
      attr->ah_attr.grh.hop_limit = 64;
      attr->ah_attr.dlid = id->remote.lid;
      attr->ah_attr.port_num = 1;
      *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_ACCESS_FLAGS;
      return 0;
    }
    case IBV_QPS_RTS:
      attr->sq_psn = id->local.psn;
      attr->timeout = 14;
      attr->retry_cnt = id->local.retry_count;
      attr->rnr_retry = id->local.rnr_retry_count;
      attr->max_rd_atomic = id->local.initiator_depth;
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
              IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    default:
      return EINVAL;
  }
}

namespace {

int Move(Id* id, ibv_qp_state state) {
  ibv_qp_attr attr{};
  attr.qp_state = state;
  int mask = 0;
  if (int err = QpAttributes(id, &attr, &mask); err != 0) return err;
  return ibv_modify_qp(id->pub.qp, &attr, mask);
}

}  // namespace

int MoveQpToInit(Id* id) {
  return Move(id, IBV_QPS_INIT);
}

int MoveQpToRts(Id* id) {
  // Each side serves as many reads as the other may have outstanding, at most what it offered.
  id->local.responder_resources =
      std::min(id->local.responder_resources, id->remote.initiator_depth);
  id->local.initiator_depth = std::min(id->local.initiator_depth, id->remote.responder_resources);
  if (int err = Move(id, IBV_QPS_RTR); err != 0) return err;
  return Move(id, IBV_QPS_RTS);
}

void MoveQpToError(Id* id) {
  if (id->pub.qp == nullptr) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(id->pub.qp, &attr, IBV_QP_STATE);
}

}  // namespace bx::simnic::cm
