// libibverbs entry points for completion queues and queue pairs, and the data path that the
// header's inline verbs reach through context->ops: post_send, post_recv, poll_cq,
// req_notify_cq. Posting costs the caller an enqueue and a doorbell; polling a ring read.
#include <sched.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "simnic/fabric.h"
#include "simnic/lid_registry.h"
#include "simnic/verbs_internal.h"

using namespace bx::simnic;

namespace bx::simnic {
namespace {

inline void CpuRelax() {
  __builtin_ia32_pause();
}

// Empty polls after which poll_cq gives the core to the simnic's hardware thread.
constexpr uint32_t kEmptyPollsBeforeYield = 64;

bool SupportedOpcode(const SimQp& qp, ibv_wr_opcode op) {
  // A datagram is a send: UD has no remote memory access and no memory windows.
  if (qp.qp.qp_type == IBV_QPT_UD) return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ || op == IBV_WR_SEND_WITH_INV ||
         op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV;
}

// A bind names a type 2 window; what else it needs is checked when the hardware executes it,
// in order with the work requests before it, and fails with a completion (memory_windows.cc).
void PrepareBind(const ibv_send_wr& wr, SendWqe& wqe) {
  ibv_mw* mw = wr.bind_mw.mw;
  const ibv_mw_bind_info& info = wr.bind_mw.bind_info;
  wqe.bind_mw_handle = mw->handle;
  wqe.bind_rkey = wr.bind_mw.rkey;
  wqe.bind_has_mr = info.mr != nullptr;
  wqe.bind_mr_lkey = info.mr != nullptr ? info.mr->lkey : 0;
  wqe.bind_addr = info.addr;
  wqe.bind_length = info.length;
  wqe.bind_access = int(info.mw_access_flags);
  // The application's copy of the rkey follows the bind at post time, as providers update a
  // type 1 window's in ibv_bind_mw(); on a failed bind the application restores it
  // (ibv_bind_mw(3)).
  mw->rkey = wr.bind_mw.rkey;
}

// What a work request moves, for its checks and its WQE. Inline data is copied at post time,
// except for a read (whose scatter list is where the data lands).
struct SendWrShape {
  int num_sge = 0;
  uint64_t total = 0;  // bytes
  bool inlined = false;
};

SendWrShape ShapeOf(const ibv_send_wr& wr) {
  const bool local_op = IsLocalOp(wr.opcode);
  SendWrShape shape;
  shape.num_sge = local_op ? 0 : wr.num_sge;
  for (int i = 0; i < shape.num_sge; ++i) shape.total += wr.sg_list[i].length;
  shape.inlined = (wr.send_flags & IBV_SEND_INLINE) && wr.opcode != IBV_WR_RDMA_READ && !local_op;
  return shape;
}

int PostSend(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  SimQp* qp = ToSim(ibqp);
  std::lock_guard lock(qp->send_mu);
  if (!SendQueueAccepts(*qp)) {
    *bad_wr = wr;
    return EINVAL;
  }
  int rc = 0;
  uint64_t posted = qp->sq_posted.load(std::memory_order_relaxed);
  const uint64_t first = posted;
  for (; wr != nullptr; wr = wr->next, ++posted) {
    if (SendQueueFull(*qp, posted)) {
      rc = ENOMEM;
      break;
    }
    if ((rc = CheckSendWr(*qp, *wr)) != 0) break;
    WriteSendWqe(qp, posted, *wr);
  }
  if (rc != 0) *bad_wr = wr;
  if (posted != first) PublishSendWqes(qp, posted);
  return rc;
}

int PostRecv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  SimQp* qp = ToSim(ibqp);
  std::lock_guard lock(qp->recv_mu);
  int state = qp->state.load(std::memory_order_acquire);
  if (state == IBV_QPS_RESET || qp->srq != nullptr) {  // with an SRQ: ibv_post_srq_recv
    *bad_wr = wr;
    return EINVAL;
  }
  int rc = 0;
  bool posted_any = false;
  for (; wr != nullptr; wr = wr->next) {
    uint64_t posted = qp->rq_posted.load(std::memory_order_relaxed);
    if (posted - qp->rq_retired.load(std::memory_order_acquire) >= qp->max_recv_wr) {
      rc = ENOMEM;
      break;
    }
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > qp->max_recv_sge) {
      rc = EINVAL;
      break;
    }
    RecvWqe& wqe = qp->rq[posted % qp->rq.size()];
    wqe.wr_id = wr->wr_id;
    wqe.num_sge = wr->num_sge;
    if (wr->num_sge > 0) std::memcpy(wqe.sge, wr->sg_list, sizeof(ibv_sge) * size_t(wr->num_sge));
    qp->rq_posted.store(posted + 1, std::memory_order_release);
    posted_any = true;
  }
  if (rc != 0) *bad_wr = wr;
  qp->device->counters().doorbells.fetch_add(1, std::memory_order_relaxed);
  // The responder reads the receive queue when a request arrives, so only a QP in error (whose
  // new receives must be flushed) needs the hardware's attention.
  if (posted_any && state == IBV_QPS_ERR) Fabric::Get().Doorbell(qp);
  return rc;
}

int PollCq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  SimCq* cq = ToSim(ibcq);
  if (cq->broken.load(std::memory_order_acquire)) return -1;
  LockPoll(cq);
  uint64_t head = cq->head.load(std::memory_order_relaxed);
  int got = 0;
  while (got < num_entries) {
    const CqEntry* e = NextCqe(cq, head);
    if (e == nullptr) break;
    wc[got++] = e->wc;
    RetireCqe(*e);
    ++head;
  }
  cq->head.store(head, std::memory_order_release);
  UnlockPoll(cq, got > 0);
  return got;
}

int ReqNotifyCq(ibv_cq* ibcq, int solicited_only) {
  // seq_cst, as the CQE store and load it pairs with (Fabric::PushCompletion, Dekker): the poll
  // that follows an arm must see any CQE written by a completion that saw the CQ unarmed.
  ToSim(ibcq)->armed.store(solicited_only ? 2 : 1, std::memory_order_seq_cst);
  return 0;
}

uint64_t RoundUpPow2(uint64_t n) {
  uint64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Which attributes each transition requires (IBA 11.2.5, table 91): an RC QP is connected to
// one peer; a UD QP has a Q_Key and no peer (each send names its destination).
constexpr int kResetToInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kInitToRtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtrToRts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
constexpr int kUdResetToInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
constexpr int kUdInitToRtr = IBV_QP_STATE;
constexpr int kUdRtrToRts = IBV_QP_STATE | IBV_QP_SQ_PSN;

int CheckTransition(ibv_qp_type type, int from, int to, int mask) {
  const bool ud = type == IBV_QPT_UD;
  auto has = [mask](int needed) { return (mask & needed) == needed ? 0 : EINVAL; };
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return 0;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) return has(ud ? kUdResetToInit : kResetToInit);
  if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) return 0;
  if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) return has(ud ? kUdInitToRtr : kInitToRtr);
  if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) return has(ud ? kUdRtrToRts : kRtrToRts);
  if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) return 0;
  return EINVAL;
}

void ResetQueues(SimQp* qp) {
  qp->sq_posted.store(0);
  qp->sq_retired.store(0);
  qp->sq_hw_next = qp->sq_hw_done = qp->sq_hw_staged = 0;
  qp->rq_posted.store(0);
  qp->rq_retired.store(0);
  qp->rq_consumed = 0;
  qp->wake_at_ns = 0;
  qp->last_wqe_reported = false;
}

}  // namespace

void LockPoll(SimCq* cq) {
  while (cq->poll_lock.test_and_set(std::memory_order_acquire)) CpuRelax();
}

void UnlockPoll(SimCq* cq, bool found) {
  // This NIC's "hardware" runs on the host's cores. An application spinning on an empty CQ
  // would hold the very core the hardware thread needs to produce the completion it waits for,
  // so after a run of empty polls the poller yields (a few ns per poll, amortised; a real NIC
  // needs no host core, so nothing is lost that hardware would have had).
  bool yield = false;
  if (!found && ++cq->empty_polls >= kEmptyPollsBeforeYield) {
    cq->empty_polls = 0;
    yield = true;
  } else if (found) {
    cq->empty_polls = 0;
  }
  cq->poll_lock.clear(std::memory_order_release);
  if (yield) sched_yield();
}

const CqEntry* NextCqe(SimCq* cq, uint64_t& head) {
  const uint64_t mask = cq->ring.size() - 1;
  for (;;) {
    const CqEntry& e = cq->ring[head & mask];
    // seq_cst: pairs with ReqNotifyCq's store (see Fabric::PushCompletion); a plain load on x86.
    if (e.sequence.load(std::memory_order_seq_cst) != head + 1) return nullptr;
    if (e.qp != nullptr) return &e;
    ++head;  // its QP was destroyed or reset
  }
}

void RetireCqe(const CqEntry& e) {
  // Polling a completion frees the work-queue slots it covers, as in the provider drivers.
  if (e.is_send) {
    e.qp->sq_retired.store(e.retire_up_to, std::memory_order_release);
  } else if (e.qp->srq != nullptr) {
    e.qp->srq->used.fetch_sub(1, std::memory_order_acq_rel);  // one SRQ WQE per receive CQE
  } else {
    e.qp->rq_retired.store(e.retire_up_to, std::memory_order_release);
  }
}

bool SendQueueAccepts(const SimQp& qp) {
  // Sends are processed in RTS; a QP in error accepts them and flushes them.
  int state = qp.state.load(std::memory_order_acquire);
  return state == IBV_QPS_RTS || state == IBV_QPS_ERR;
}

bool SendQueueFull(const SimQp& qp, uint64_t index) {
  return index - qp.sq_retired.load(std::memory_order_acquire) >= qp.max_send_wr;
}

int CheckSendWr(const SimQp& qp, const ibv_send_wr& wr) {
  if (!SupportedOpcode(qp, wr.opcode) || wr.num_sge < 0 || uint32_t(wr.num_sge) > qp.max_send_sge)
    return EINVAL;
  const SendWrShape shape = ShapeOf(wr);
  if (shape.total > kMaxMsgSize || (shape.inlined && shape.total > qp.max_inline_data))
    return EINVAL;
  if (wr.opcode == IBV_WR_BIND_MW &&
      (wr.bind_mw.mw == nullptr || wr.bind_mw.mw->type != IBV_MW_TYPE_2))
    return EINVAL;
  // A datagram names its destination, on this device. (Its length is checked against the MTU
  // when it is sent, and fails there with a completion, as hardware reports it.)
  if (qp.qp.qp_type == IBV_QPT_UD &&
      (wr.wr.ud.ah == nullptr || wr.wr.ud.ah->context != qp.qp.context))
    return EINVAL;
  return 0;
}

namespace {

// The destination of a datagram, as the WQE holds it. The Q_Key with its top bit set means
// "the QP's own" (IBA 10.2.5: a privileged Q_Key cannot be sent from an ordinary QP).
UdAddress DatagramAddress(const SimQp& qp, const ibv_send_wr& wr) {
  const SimAh& ah = *ToSim(wr.wr.ud.ah);
  UdAddress a{};
  a.peer_address = ah.peer_address;
  a.route.source_gid = ah.source_gid;
  a.route.dest_gid = ah.attr.grh.dgid;
  a.route.global = ah.attr.is_global != 0;
  a.route.sl = ah.attr.sl;
  a.route.traffic_class = ah.attr.grh.traffic_class;
  a.route.hop_limit = ah.attr.grh.hop_limit;
  a.route.flow_label = ah.attr.grh.flow_label;
  a.remote_qpn = wr.wr.ud.remote_qpn & 0xffffff;
  a.qkey = (wr.wr.ud.remote_qkey & 0x80000000u) ? qp.attr.qkey : wr.wr.ud.remote_qkey;
  return a;
}

}  // namespace

void WriteSendWqe(SimQp* qp, uint64_t index, const ibv_send_wr& wr) {
  const SendWrShape shape = ShapeOf(wr);
  SendWqe& wqe = qp->sq[index % qp->sq.size()];
  if (wr.opcode == IBV_WR_BIND_MW) PrepareBind(wr, wqe);
  wqe.wr_id = wr.wr_id;
  wqe.opcode = wr.opcode;
  wqe.signaled = (wr.send_flags & IBV_SEND_SIGNALED) != 0;
  wqe.solicited = (wr.send_flags & IBV_SEND_SOLICITED) != 0;
  wqe.inlined = shape.inlined;
  wqe.imm_data = wr.imm_data;
  if (qp->qp.qp_type == IBV_QPT_UD) {
    wqe.ud = DatagramAddress(*qp, wr);
    wqe.remote_addr = 0;
    wqe.rkey = 0;
  } else {
    wqe.remote_addr = wr.wr.rdma.remote_addr;
    wqe.rkey = wr.wr.rdma.rkey;
  }
  wqe.length = uint32_t(shape.total);
  wqe.num_sge = shape.num_sge;
  if (wqe.inlined) {
    // The NIC's WQE holds inline data: the buffer may be reused as soon as post returns.
    size_t off = 0;
    for (int i = 0; i < shape.num_sge; ++i) {
      std::memcpy(wqe.inline_data + off,
                  reinterpret_cast<const void*>(uintptr_t(wr.sg_list[i].addr)),
                  wr.sg_list[i].length);
      off += wr.sg_list[i].length;
    }
  } else if (shape.num_sge > 0) {  // a request with no scatter list may pass a null sg_list
    std::memcpy(wqe.sge, wr.sg_list, sizeof(ibv_sge) * size_t(shape.num_sge));
  }
}

void PublishSendWqes(SimQp* qp, uint64_t posted) {
  qp->sq_posted.store(posted, std::memory_order_seq_cst);
  Fabric::Get().Doorbell(qp);
}

void InitContextOps(SimContext* c) {
  ibv_context_ops& ops = c->vctx.context.ops;
  ops.post_send = PostSend;
  ops.post_recv = PostRecv;
  ops.poll_cq = PollCq;
  ops.req_notify_cq = ReqNotifyCq;
  InitMemoryWindowOps(c);
  InitSrqOps(c);
  InitCqExOps(c);
  InitQpExOps(c);
}

namespace {

// CQs by serial whose channel events may still be returned.
std::mutex& EventSourcesMutex() {
  static std::mutex* const mu = new std::mutex;
  return *mu;
}
std::unordered_set<uint64_t>& LiveEventSources() {
  static auto* const live = new std::unordered_set<uint64_t>;
  return *live;
}

}  // namespace

uint64_t RegisterEventSource() {
  static std::atomic<uint64_t> next{1};
  uint64_t serial = next.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(EventSourcesMutex());
  LiveEventSources().insert(serial);
  return serial;
}

void RetireEventSource(uint64_t serial) {
  std::lock_guard lock(EventSourcesMutex());
  LiveEventSources().erase(serial);
}

bool TakeChannelEvent(const ChannelEvent& event) {
  // Under the registry lock: destroy_cq cannot retire the CQ and free it meanwhile.
  std::lock_guard lock(EventSourcesMutex());
  if (LiveEventSources().count(event.serial) == 0) return false;
  std::lock_guard events_lock(event.cq->events_mu);
  ++event.cq->events_taken;
  return true;
}

}  // namespace bx::simnic

namespace {

// RoCE carries a GRH on every packet, so its address vector must be global with a valid source
// GID; InfiniBand may route by LID alone. The default profile checks only that it is global.
// `port` is the QP's port (the AV's, when it names one).
int CheckAddressVector(const Device& device, uint32_t port, const ibv_ah_attr& av) {
  if (!device.PortExists(port)) return EINVAL;
  const DeviceProfile& profile = device.profile();
  const bool infiniband = profile.link_layer == IBV_LINK_LAYER_INFINIBAND;
  if (!av.is_global) return infiniband ? 0 : EINVAL;
  if (profile.strict_addressing && av.grh.sgid_index >= device.gid_table(port).size())
    return EINVAL;
  return 0;
}

uint32_t PathPort(const SimQp& qp, const ibv_ah_attr& av) {
  if (av.port_num != 0) return av.port_num;
  return qp.attr.port_num != 0 ? qp.attr.port_num : 1;
}

// Resolves the AV to the peer's fabric address, once, at modify time: the hardware thread then
// routes without looking at GIDs or LIDs. An address nobody holds resolves to zero, so requests
// go unanswered and fail after the transport retries, as on a real fabric.
void ApplyAddressVector(const Device& device, uint32_t port, const ibv_ah_attr& av, SimQp* qp) {
  qp->peer_address = ResolveAddressVector(av);
  const bool ethernet = device.profile().link_layer == IBV_LINK_LAYER_ETHERNET;
  const auto& table = device.gid_table(port);
  qp->roce_v1 = ethernet && av.is_global && av.grh.sgid_index < table.size() &&
                table[av.grh.sgid_index].type == GidType::kRoceV1;
  qp->unmarked = ethernet && av.grh.traffic_class == 0;
}

}  // namespace

namespace bx::simnic {

ibv_gid ResolveAddressVector(const ibv_ah_attr& av) {
  ibv_gid address{};
  if (av.is_global) {
    (void)ResolveGid(av.grh.dgid, &address);
  } else if (uint32_t pid = 0, index = 0; LookupLid(av.dlid, &pid, &index)) {
    address = MakeGid(pid, index);
  }
  return address;
}

SimCq* CreateCq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                int comp_vector) {
  if (cqe < 1 || cqe > kMaxCqe || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new SimCq{};
  cq->serial = RegisterEventSource();
  cq->cq.context = context;
  cq->cq.channel = channel;
  cq->cq.cq_context = cq_context;
  cq->cq.cqe = cqe;
  cq->capacity = cqe;
  cq->ring = std::vector<CqEntry>(RoundUpPow2(uint64_t(cqe)));
  pthread_mutex_init(&cq->cq.mutex, nullptr);
  pthread_cond_init(&cq->cq.cond, nullptr);
  if (channel != nullptr) ++channel->refcnt;
  return cq;
}

ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* init, const ibv_qp_init_attr_ex* ext) {
  if (pd == nullptr || init == nullptr || init->send_cq == nullptr || init->recv_cq == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (init->qp_type != IBV_QPT_RC && init->qp_type != IBV_QPT_UD) {
    errno = EOPNOTSUPP;  // the simnic implements RC and UD
    return nullptr;
  }
  ibv_qp_cap& cap = init->cap;
  // max_send_wr = 0 is a receive-only QP (hardware accepts it; every send then fails ENOMEM).
  if (cap.max_send_wr > uint32_t(kMaxQpWr) || cap.max_recv_wr > uint32_t(kMaxQpWr) ||
      cap.max_send_sge > uint32_t(kMaxSge) || cap.max_recv_sge > uint32_t(kMaxSge) ||
      cap.max_inline_data > ToSim(pd->context)->device->profile().max_inline_data) {
    errno = EINVAL;
    return nullptr;
  }
  SimContext* context = ToSim(pd->context);
  auto* qp = new SimQp{};
  qp->device = context->device;
  qp->protection_domain = Protection(pd);
  qp->td = ToSim(pd)->td;
  qp->sq_sig_all = init->sq_sig_all != 0;
  qp->max_send_wr = cap.max_send_wr;
  // With an SRQ the QP's own receive queue is not used (ibv_create_qp(3): max_recv_wr and
  // max_recv_sge are ignored).
  qp->srq = init->srq != nullptr ? ToSim(init->srq) : nullptr;
  if (qp->srq != nullptr) cap.max_recv_wr = cap.max_recv_sge = 0;
  qp->max_recv_wr = cap.max_recv_wr;
  qp->max_send_sge = std::max<uint32_t>(cap.max_send_sge, 1);
  qp->max_recv_sge = std::max<uint32_t>(cap.max_recv_sge, 1);
  qp->max_inline_data = cap.max_inline_data;
  qp->sq.resize(std::max<uint32_t>(cap.max_send_wr, 1));  // never empty: indices wrap modulo
  qp->rq.resize(std::max<uint32_t>(cap.max_recv_wr, 1));
  // Report what was granted, as providers do.
  cap.max_send_sge = qp->max_send_sge;
  cap.max_recv_sge = qp->max_recv_sge;

  ibv_qp& q = qp->qp;
  q.context = pd->context;
  q.qp_context = init->qp_context;
  q.pd = pd;
  q.send_cq = init->send_cq;
  q.recv_cq = init->recv_cq;
  q.qp_type = init->qp_type;
  q.state = IBV_QPS_RESET;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  q.qp_num = context->device->AddQp(qp);
  q.handle = q.qp_num;
  qp->protection_domain->users.fetch_add(1);
  if (qp->srq != nullptr) qp->srq->users.fetch_add(1);
  ToSim(init->send_cq)->users.fetch_add(1);
  ToSim(init->recv_cq)->users.fetch_add(1);
  if (ext != nullptr && (ext->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
    qp->extended = true;
    FillWrOps(&qp->qp_ex);
  }
  return &q;
}

}  // namespace bx::simnic

extern "C" {

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector) {
  SimCq* cq = CreateCq(context, cqe, cq_context, channel, comp_vector);
  return cq != nullptr ? &cq->cq : nullptr;
}

int ibv_destroy_cq(ibv_cq* ibcq) {
  SimCq* cq = ToSim(ibcq);
  if (cq->users.load() > 0) return EBUSY;
  // Events still unread in the channel are dropped (ibv_get_cq_event skips them from now on);
  // as libibverbs does, wait until every event the application took is acknowledged.
  RetireEventSource(cq->serial);
  {
    std::unique_lock lock(cq->events_mu);
    cq->events_cv.wait(lock, [cq] { return cq->events_acked >= cq->events_taken; });
  }
  if (ibcq->channel != nullptr) --ibcq->channel->refcnt;
  pthread_mutex_destroy(&ibcq->mutex);
  pthread_cond_destroy(&ibcq->cond);
  delete cq;
  return 0;
}

int ibv_resize_cq(ibv_cq*, int) {
  return EOPNOTSUPP;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  return CreateQp(pd, init, nullptr);
}

int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  SimQp* qp = ToSim(ibqp);
  Fabric& fabric = Fabric::Get();
  Fabric::ControlLock lock(fabric);
  int from = qp->state.load();
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != from) return EINVAL;
  int to = (mask & IBV_QP_STATE) ? attr->qp_state : from;
  if (int rc = CheckTransition(ibqp->qp_type, from, to, mask); rc != 0) return rc;
  if ((mask & IBV_QP_PORT) && !qp->device->PortExists(attr->port_num)) return EINVAL;
  if (mask & IBV_QP_AV) {
    const uint32_t port = PathPort(*qp, attr->ah_attr);
    if (int rc = CheckAddressVector(*qp->device, port, attr->ah_attr); rc != 0) return rc;
  }
  if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31) return EINVAL;

  ibv_qp_attr& a = qp->attr;
  if (mask & IBV_QP_PKEY_INDEX) a.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_QKEY) a.qkey = attr->qkey;
  if (mask & IBV_QP_PORT) a.port_num = attr->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) a.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_AV) {
    a.ah_attr = attr->ah_attr;
    ApplyAddressVector(*qp->device, PathPort(*qp, a.ah_attr), a.ah_attr, qp);
  }
  if (mask & IBV_QP_PATH_MTU) a.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_DEST_QPN) a.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) a.rq_psn = attr->rq_psn & 0xffffff;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) a.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) a.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) a.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) a.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_SQ_PSN) a.sq_psn = attr->sq_psn & 0xffffff;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) a.max_rd_atomic = attr->max_rd_atomic;

  if (to == IBV_QPS_ERR) {
    fabric.SettleArrivals(qp);
    fabric.FailQp(qp, false);
    return 0;
  }
  if (to == IBV_QPS_RESET) {
    // Work requests are discarded without completions; completions not yet polled vanish too.
    fabric.ForgetQp(qp);
    qp->destroyed = false;
    ResetQueues(qp);
  }
  if (to == IBV_QPS_RTR && from != IBV_QPS_RTR) qp->expected_psn = a.rq_psn;
  if (to == IBV_QPS_RTS && from != IBV_QPS_RTS) qp->next_send_psn = a.sq_psn;
  a.qp_state = ibv_qp_state(to);
  qp->qp.state = ibv_qp_state(to);
  qp->state.store(to, std::memory_order_seq_cst);
  return 0;
}

int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  SimQp* qp = ToSim(ibqp);
  Fabric::ControlLock lock(Fabric::Get());
  *attr = qp->attr;
  attr->qp_state = ibv_qp_state(qp->state.load());
  attr->cur_qp_state = attr->qp_state;
  attr->cap.max_send_wr = qp->max_send_wr;
  attr->cap.max_recv_wr = qp->max_recv_wr;
  attr->cap.max_send_sge = qp->max_send_sge;
  attr->cap.max_recv_sge = qp->max_recv_sge;
  attr->cap.max_inline_data = qp->max_inline_data;
  if (init != nullptr) {
    std::memset(init, 0, sizeof(*init));
    init->qp_context = ibqp->qp_context;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->cap = attr->cap;
    init->qp_type = ibqp->qp_type;
    init->sq_sig_all = qp->sq_sig_all;
    init->srq = qp->srq != nullptr ? &qp->srq->srq : nullptr;
  }
  return 0;
}

int ibv_destroy_qp(ibv_qp* ibqp) {
  SimQp* qp = ToSim(ibqp);
  {
    Fabric::ControlLock lock(Fabric::Get());
    Fabric::Get().ForgetQp(qp);
    qp->device->RemoveQp(ibqp->qp_num);
    qp->device->FreeWindowsOf(qp);
  }
  qp->protection_domain->users.fetch_sub(1);
  if (qp->srq != nullptr) qp->srq->users.fetch_sub(1);
  ToSim(ibqp->send_cq)->users.fetch_sub(1);
  ToSim(ibqp->recv_cq)->users.fetch_sub(1);
  pthread_mutex_destroy(&ibqp->mutex);
  pthread_cond_destroy(&ibqp->cond);
  delete qp;
  return 0;
}

}  // extern "C"
