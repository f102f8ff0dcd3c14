// The simnic's connection manager: librdmacm's API (rdma/rdma_cma.h) for programs that connect
// through it (rping, ucmatose, perftest -R, libfabric's verbs provider), preloaded after the
// simnic: LD_PRELOAD="libbx_simnic.so libbx_simnic_cm.so".
//
// The kernel's CM exchanges REQ, REP, RTU, REJ, DREQ and DREP MADs between the two hosts' CMs;
// here they travel over one unix stream socket per connection, to a listener named by its RDMA
// CM port (the abstract socket "@bxsim-cm.<port>"): the RDMA CM's ports are a space of their
// own, as in the kernel, so a program may use port 7174 for a TCP socket and for the RDMA CM at
// once (fi_pingpong and perftest -R do). Every address is this host's, as with the simnic's
// fabric: a listener on port P answers whatever IP the client addressed. The QPs
// themselves are the simnic's, moved through INIT, RTR and RTS as the kernel's CM moves them, with
// the peer's QP number, PSN and GID from the exchange. One agent thread per process reads the
// sockets and turns messages into events on the programs' event channels, whose fds become
// readable when an event is queued, as the kernel's do.
//
// Threads: the API may be called from any thread; one mutex (CmMutex) guards every object here,
// and the agent holds it while it handles a message.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace bx::simnic::cm {

// What one side tells the other in a REQ or REP (the kernel's REQ/REP fields a QP needs).
struct Endpoint {
  uint32_t qp_num = 0;
  uint32_t psn = 0;
  uint8_t gid[16] = {};
  uint16_t lid = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t flow_control = 1;
  uint8_t srq = 0;
  uint8_t private_data_len = 0;
  uint8_t private_data[196] = {};  // the REP's room; a REQ carries at most 56 (RDMA_PS_TCP)
  // REQ only: the active side's address and the one it addressed (the passive id's route).
  sockaddr_storage source{}, destination{};
};

enum class MessageType : uint8_t { kReq = 1, kRep, kRtu, kRej, kDreq, kDrep };

// The kernel's limits on private data per message (IB CM, less the RDMA CM's own header).
constexpr uint8_t kReqPrivateData = 56;
constexpr uint8_t kRepPrivateData = 196;
constexpr uint8_t kRejPrivateData = 148;
// REJ reasons as the kernel reports them in event->status.
constexpr int kRejectInvalidServiceId = 8;  // nothing listens at that port
constexpr int kRejectConsumer = 28;         // the listener called rdma_reject

struct Event {
  rdma_cm_event pub{};  // first: the pointer handed out is this
  bool dead = false;    // its id was destroyed before the program took it
  uint8_t private_data[256] = {};
};

struct Channel {
  rdma_event_channel pub{};     // first
  int write_fd = -1;            // one byte per queued event: pub.fd is readable while any is
  std::deque<Event*> queue;     // guarded by CmMutex
  bool internal = false;        // a synchronous id's own (rdma_create_ep, or no channel given)
  std::atomic<int> waiters{0};  // threads inside rdma_get_cm_event
};

enum class State {
  kIdle,
  kBound,
  kListening,
  kAddrResolved,
  kRouteResolved,
  kConnecting,  // active: REQ sent (or the TCP connect under way), no REP yet
  kRequested,   // passive: the REQ arrived, no rdma_accept or rdma_reject yet
  kAccepted,    // passive: REP sent, waiting for the RTU
  kResponded,   // active without a QP: REP arrived, rdma_establish not called yet
  kEstablished,
  kDisconnecting,  // DREQ sent, no DREP yet
  kDisconnected,
};

struct Id {
  rdma_cm_id pub{};  // first
  Channel* channel = nullptr;
  State state = State::kIdle;
  int fd = -1;             // the listening socket, or the stream to the peer's CM
  std::string inbox;       // bytes read from fd, not yet a whole message
  Id* listener = nullptr;  // passive: the id the request came in on
  bool announced = false;  // passive: its CONNECT_REQUEST was queued
  Endpoint local, remote;
  bool own_cqs = false;  // rdma_create_qp made the CQs (and their channels)
  // rdma_create_ep with QP attributes on a listener: each request's id gets a QP like them.
  bool request_qp = false;
  ibv_qp_init_attr request_qp_attr{};
  ibv_pd* request_pd = nullptr;
};

std::mutex& CmMutex();

// The simnic device every address maps to (the first bxsim device, opened once) and its PD
// for rdma_create_qp without one. Null when there is none. CmMutex held.
ibv_context* DeviceContext();
ibv_pd* DefaultPd(ibv_context* context);

// Queues an event for `id` on its channel; `data` is copied (private data). CmMutex held.
void PushEvent(Id* id, rdma_cm_event_type type, int status, const Endpoint* peer = nullptr,
               Id* listen_id = nullptr);
// Sends one message on id->fd; false when the peer is gone. CmMutex held.
bool SendMessage(Id* id, MessageType type, const Endpoint* endpoint);
// The abstract unix socket address of the RDMA CM port in `address` (listeners bind it, clients
// connect to it), and that port.
socklen_t CmSocketAddress(const sockaddr* address, sockaddr_un* out);
uint16_t PortOf(const sockaddr* address);
void SetPort(sockaddr* address, uint16_t port);
// Registers id->fd with the agent (started on first use). CmMutex held.
void WatchSocket(Id* id);
void UnwatchSocket(Id* id);
// Unwatches and closes id->fd (when open). CmMutex held.
void CloseSocket(Id* id);
// A random port of the kernel's ephemeral range, for a bind to port 0 and an active id's own.
// CmMutex held.
uint16_t EphemeralPort();
// A listener goes: requests it has not announced are dropped (their sockets closed), the others
// forget it. CmMutex held.
void ForgetRequestsOf(Id* listener);
// Moves id's QP to INIT, RTR and RTS from id->local and id->remote; 0 or an errno.
int MoveQpToInit(Id* id);
int MoveQpToRts(Id* id);
int QpAttributes(Id* id, ibv_qp_attr* attr, int* mask);  // for attr->qp_state (rdma_init_qp_attr)
void MoveQpToError(Id* id);
// The local side of a connection: QP number, a random PSN, GID, LID; conn_param's resources.
// EINVAL when the private data is longer than `max_private_data`.
int FillLocalEndpoint(Id* id, const rdma_conn_param* param, uint8_t max_private_data);

inline Id* ToId(rdma_cm_id* id) {
  return reinterpret_cast<Id*>(id);
}

}  // namespace bx::simnic::cm
