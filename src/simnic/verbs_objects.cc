// libibverbs entry points for devices, contexts, protection/thread/parent domains, memory
// regions and events: the control path. Exported under their libibverbs names and versions
// (libbx_simnic.map). Errors follow the man pages: NULL or -1 with errno, or an errno return.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "simnic/fabric.h"
#include "simnic/verbs_internal.h"

using namespace bx::simnic;

namespace bx::simnic {

Device* FindDevice(ibv_device* d) {
  for (Device* dev : Fabric::Get().devices())
    if (dev->ibv() == d) return dev;
  return nullptr;
}

bool IsSimContext(ibv_context* c) {
  return c != nullptr && ToSim(c)->magic == kContextMagic;
}

namespace {

int FillDeviceAttr(Device* dev, ibv_device_attr* attr) {
  std::memset(attr, 0, sizeof(*attr));
  std::snprintf(attr->fw_ver, sizeof(attr->fw_ver), "bxsim-1.0");
  attr->node_guid = dev->guid_be();
  attr->sys_image_guid = dev->guid_be();
  attr->max_mr_size = kMaxMrSize;
  attr->page_size_cap = 4096;
  attr->vendor_id = 0xb5e;
  attr->vendor_part_id = 1;
  attr->hw_ver = 1;
  attr->max_qp = kMaxQp;
  attr->max_qp_wr = kMaxQpWr;
  attr->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                           IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_SRQ_RESIZE;
  attr->max_sge = kMaxSge;
  attr->max_sge_rd = kMaxSge;
  attr->max_cq = kMaxQp;
  attr->max_cqe = kMaxCqe;
  attr->max_mr = kMaxMr;
  attr->max_mw = kMaxMw;
  attr->max_pd = 1 << 16;
  attr->max_srq = kMaxQp;
  attr->max_srq_wr = kMaxQpWr;
  attr->max_srq_sge = kMaxSge;
  attr->max_qp_rd_atom = 16;
  attr->max_qp_init_rd_atom = 16;
  attr->max_res_rd_atom = kMaxQp * 16;
  attr->atomic_cap = IBV_ATOMIC_NONE;
  attr->max_pkeys = 1;
  attr->local_ca_ack_delay = 16;
  attr->phys_port_cnt = dev->profile().ports;
  return 0;
}

int FillPortAttr(Device* dev, uint8_t port, ibv_port_attr* attr, size_t len) {
  if (!dev->PortExists(port)) return EINVAL;
  ibv_port_attr a{};
  bool up = dev->PortUp(port);
  a.state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  const DeviceProfile& profile = dev->profile();
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = profile.active_mtu;
  a.gid_tbl_len = int(profile.gid_table_length);
  a.port_cap_flags = 0;
  a.max_msg_sz = kMaxMsgSize;
  a.pkey_tbl_len = 1;
  a.active_width = 2;         // 4x
  a.active_speed = 32;        // 25 Gbps per lane (EDR-class): a 100 Gbps port
  a.phys_state = up ? 5 : 3;  // LinkUp : Disabled
  a.link_layer = profile.link_layer;
  if (profile.link_layer == IBV_LINK_LAYER_INFINIBAND) {
    a.lid = dev->lid();
    a.sm_lid = 1;  // the subnet manager: any LID will do, nothing talks to it
    a.lmc = 0;
    a.port_cap_flags = IBV_PORT_CM_SUP;
  }
  std::memcpy(attr, &a, std::min(len, sizeof(a)));
  return 0;
}

int QueryPortOp(ibv_context* context, uint8_t port, ibv_port_attr* attr, size_t len) {
  return FillPortAttr(ToSim(context)->device, port, attr, len);
}

int QueryDeviceExOp(ibv_context* context, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (size < sizeof(ibv_device_attr)) return EINVAL;
  std::memset(attr, 0, size);
  int err = FillDeviceAttr(ToSim(context)->device, &attr->orig_attr);
  // Extended fields the caller's (possibly older) struct has room for.
  if (err == 0 &&
      size >= offsetof(ibv_device_attr_ex, phys_port_cnt_ex) + sizeof(attr->phys_port_cnt_ex)) {
    attr->phys_port_cnt_ex = attr->orig_attr.phys_port_cnt;
  }
  return err;
}

ibv_td* AllocTdOp(ibv_context* context, ibv_td_init_attr* init_attr) {
  if (init_attr == nullptr || init_attr->comp_mask != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* td = new SimTd{};
  td->td.context = context;
  return &td->td;
}

int DeallocTdOp(ibv_td* td) {
  auto* sim = reinterpret_cast<SimTd*>(td);
  if (sim->users.load() > 0) return EBUSY;
  delete sim;
  return 0;
}

ibv_pd* AllocParentDomainOp(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kKnownMask =
      IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (!ToSim(context)->device->profile().parent_domains) {
    errno = EOPNOTSUPP;  // as a provider without the verb: libibverbs' wrapper says so
    return nullptr;
  }
  if (attr == nullptr || attr->pd == nullptr || (attr->comp_mask & ~kKnownMask) != 0 ||
      ToSim(attr->pd)->is_parent_domain || attr->pd->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  auto* pd = new SimPd{};
  pd->pd.context = context;
  pd->pd.handle = attr->pd->handle;
  pd->protection_domain = ToSim(attr->pd);
  pd->td = attr->td;
  pd->is_parent_domain = true;
  pd->protection_domain->users.fetch_add(1);
  if (attr->td != nullptr) reinterpret_cast<SimTd*>(attr->td)->users.fetch_add(1);
  return &pd->pd;
}

constexpr int kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                             IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING;

// Real registration pins every page (ib_umem_get): a hole fails with EFAULT, and every page is
// faulted in then, writable when the access is, so the NIC never meets a page fault in the data
// path. The simnic does the same: mincore() walks the page tables and fails with ENOMEM on a hole,
// then MADV_POPULATE_* faults the range in, on the registering thread, where hardware pays it
// too. Without it the first touch of each page fell to the simnic's hardware thread, in the middle
// of a transfer (a growing pool then slowed the "NIC" itself).
// Returns 0 or the errno registration fails with.
int PinRange(const void* addr, size_t length, unsigned access) {
  static const size_t kPage = size_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr) & ~(kPage - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + length;
  unsigned char vec[1024];
  for (uintptr_t at = begin; at < end;) {
    size_t chunk = std::min<size_t>(end - at, sizeof(vec) * kPage);
    if (mincore(reinterpret_cast<void*>(at), chunk, vec) != 0) return EFAULT;
    at += chunk;
  }
  constexpr unsigned kWritable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
  const int advice = (access & kWritable) != 0 ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  // A kernel before 5.14 has no MADV_POPULATE_*: pages are then faulted in on first use.
  static const bool kCanPopulate = [] {
    static char probe[1];
    const auto page = reinterpret_cast<uintptr_t>(probe) & ~(kPage - 1);
    return madvise(reinterpret_cast<void*>(page), kPage, MADV_POPULATE_READ) == 0;
  }();
  if (!kCanPopulate || madvise(reinterpret_cast<void*>(begin), end - begin, advice) == 0) return 0;
  // EINVAL is a mapping the access does not allow (read-only under a writable registration,
  // PROT_NONE, VM_IO): pinning fails there too.
  return errno == ENOMEM ? ENOMEM : EFAULT;
}

// Access flags a registration may ask for: known ones, and remote write only with local write.
bool ValidMrAccess(unsigned access) {
  return (access & ~unsigned(kKnownAccess)) == 0 &&
         !((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
           !(access & IBV_ACCESS_LOCAL_WRITE));
}

ibv_mr* RegisterMr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (pd == nullptr || length == 0 || !ValidMrAccess(access) || length > kMaxMrSize) {
    errno = EINVAL;
    return nullptr;
  }
  if (int error = PinRange(addr, length, access); error != 0) {
    errno = error;
    return nullptr;
  }
  SimPd* protection = Protection(pd);
  Device* dev = ToSim(pd->context)->device;
  SimMr* mr = dev->RegisterMr(protection, addr, length, iova, int(access));
  if (mr == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  protection->users.fetch_add(1);
  return &mr->mr;
}

}  // namespace

void InitContextOps(SimContext* c);  // verbs_queues.cc

}  // namespace bx::simnic

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  auto devices = Fabric::Get().devices();
  auto** list = static_cast<ibv_device**>(calloc(devices.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < devices.size(); ++i) list[i] = devices[i]->ibv();
  if (num_devices != nullptr) *num_devices = int(devices.size());
  return list;
}

void ibv_free_device_list(ibv_device** list) {
  free(list);
}

const char* ibv_get_device_name(ibv_device* device) {
  return device->name;
}

__be64 ibv_get_device_guid(ibv_device* device) {
  Device* dev = FindDevice(device);
  return dev ? dev->guid_be() : 0;
}

int ibv_get_device_index(ibv_device* device) {
  Device* dev = FindDevice(device);
  return dev ? dev->index() : -1;
}

ibv_context* ibv_open_device(ibv_device* device) {
  Device* dev = FindDevice(device);
  if (dev == nullptr) {
    errno = ENODEV;
    return nullptr;
  }
  Fabric::Get().Start();
  auto* c = new SimContext{};
  c->device = dev;
  if (pipe2(c->async_pipe, O_CLOEXEC) != 0) {
    delete c;
    return nullptr;
  }
  fcntl(c->async_pipe[1], F_SETFL, O_NONBLOCK);
  verbs_context& v = c->vctx;
  v.sz = sizeof(verbs_context);
  v.query_port = QueryPortOp;
  v.query_device_ex = QueryDeviceExOp;
  v.alloc_td = AllocTdOp;
  v.dealloc_td = DeallocTdOp;
  v.alloc_parent_domain = AllocParentDomainOp;
  ibv_context& ctx = v.context;
  ctx.device = device;
  // A kernel device gives each context a command fd (/dev/infiniband/uverbsN) that programs may
  // dup or pass to ibv_import_device; this one is an open /dev/null, so those calls get a valid
  // descriptor, and importing fails as the simnic says (EOPNOTSUPP), not with EBADF.
  ctx.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  ctx.async_fd = c->async_pipe[0];
  ctx.num_comp_vectors = 1;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  pthread_mutex_init(&ctx.mutex, nullptr);
  InitContextOps(c);
  dev->AddContext(c);
  return &ctx;
}

int ibv_close_device(ibv_context* context) {
  SimContext* c = ToSim(context);
  c->device->RemoveContext(c);
  close(c->async_pipe[0]);
  close(c->async_pipe[1]);
  if (context->cmd_fd >= 0) close(context->cmd_fd);
  pthread_mutex_destroy(&context->mutex);
  c->magic = 0;
  delete c;
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  return FillDeviceAttr(ToSim(context)->device, attr);
}

// The exported (compat) symbol; the header's ibv_query_port macro prefers the context op.
// The compat struct is the prefix of ibv_port_attr that ends before `flags`.
int(ibv_query_port)(ibv_context* context, uint8_t port, struct _compat_ibv_port_attr* attr) {
  return FillPortAttr(ToSim(context)->device, port, reinterpret_cast<ibv_port_attr*>(attr),
                      offsetof(ibv_port_attr, flags));
}

int ibv_query_gid(ibv_context* context, uint8_t port, int index, ibv_gid* gid) {
  const Device& device = *ToSim(context)->device;
  if (!device.PortExists(port) || index < 0 ||
      uint32_t(index) >= device.profile().gid_table_length) {
    errno = EINVAL;
    return -1;
  }
  const auto& table = device.gid_table(port);
  *gid = uint32_t(index) < table.size() ? table[size_t(index)].gid : ibv_gid{};  // empty: zero
  return 0;
}

int ibv_query_pkey(ibv_context* context, uint8_t port, int index, __be16* pkey) {
  if (!ToSim(context)->device->PortExists(port) || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = 0xffff;
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  auto* pd = new SimPd{};
  pd->pd.context = context;
  pd->pd.handle = uint32_t(reinterpret_cast<uintptr_t>(pd) >> 4);
  pd->protection_domain = pd;
  return &pd->pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  SimPd* sim = ToSim(pd);
  if (sim->users.load() > 0) return EBUSY;
  if (sim->is_parent_domain) {
    sim->protection_domain->users.fetch_sub(1);
    if (sim->td != nullptr) reinterpret_cast<SimTd*>(sim->td)->users.fetch_sub(1);
  }
  delete sim;
  return 0;
}

ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  return RegisterMr(pd, addr, length, reinterpret_cast<uintptr_t>(addr), unsigned(access));
}

ibv_mr*(ibv_reg_mr_iova)(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return RegisterMr(pd, addr, length, iova, unsigned(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  return RegisterMr(pd, addr, length, iova, access);
}

int ibv_dereg_mr(ibv_mr* mr) {
  auto* sim = reinterpret_cast<SimMr*>(mr);
  SimPd* protection = sim->protection_domain;
  if (!ToSim(mr->context)->device->DeregisterMr(sim)) return EBUSY;  // windows are bound to it
  protection->users.fetch_sub(1);
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  auto* ch = new SimChannel{};
  ch->channel.context = context;
  ch->channel.fd = fds[0];
  ch->channel.refcnt = 0;
  ch->write_fd = fds[1];
  return &ch->channel;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  auto* ch = reinterpret_cast<SimChannel*>(channel);
  if (channel->refcnt > 0) return EBUSY;
  close(channel->fd);
  close(ch->write_fd);
  delete ch;
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  for (;;) {
    ChannelEvent event{};
    ssize_t n;
    do {
      n = read(channel->fd, &event, sizeof(event));
    } while (n < 0 && errno == EINTR);
    if (n != ssize_t(sizeof(event))) return -1;
    // An event of a CQ destroyed before it was read was dropped at destroy: read the next one.
    if (!TakeChannelEvent(event)) continue;
    *cq = &event.cq->cq;
    *cq_context = event.cq->cq.cq_context;
    return 0;
  }
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  SimCq* sim = ToSim(cq);
  std::lock_guard lock(sim->events_mu);
  sim->events_acked += nevents;
  sim->events_cv.notify_all();
}

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  AsyncRecord record;
  ssize_t n;
  do {
    n = read(context->async_fd, &record, sizeof(record));
  } while (n < 0 && errno == EINTR);
  if (n != ssize_t(sizeof(record))) return -1;
  event->event_type = record.type;
  switch (record.type) {
    case IBV_EVENT_CQ_ERR:
      event->element.cq = static_cast<ibv_cq*>(record.object);
      break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
      event->element.port_num = int(reinterpret_cast<uintptr_t>(record.object));
      break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      event->element.srq = static_cast<ibv_srq*>(record.object);
      break;
    default:
      event->element.qp = static_cast<ibv_qp*>(record.object);
      break;
  }
  return 0;
}

void ibv_ack_async_event(ibv_async_event*) {}

// The simnic needs nothing for fork (its "DMA" is the process's own memory); it remembers the
// call so that ibv_is_fork_initialized answers as libibverbs does after it.
std::atomic<bool> g_fork_initialized{false};

int ibv_fork_init(void) {
  g_fork_initialized.store(true);
  return 0;
}

ibv_fork_status ibv_is_fork_initialized(void) {
  return g_fork_initialized.load() ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

// Keys stay as they were. Returns 0, or an ibv_rereg_mr_err_code with errno set.
int ibv_rereg_mr(ibv_mr* ibmr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  constexpr int kKnownFlags =
      IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  auto* mr = reinterpret_cast<SimMr*>(ibmr);
  const bool translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  const bool new_pd = flags & IBV_REREG_MR_CHANGE_PD;
  const bool new_access = flags & IBV_REREG_MR_CHANGE_ACCESS;
  if (ibmr == nullptr || flags == 0 || (flags & ~kKnownFlags) != 0 || (new_pd && pd == nullptr) ||
      (translation && (length == 0 || length > kMaxMrSize)) ||
      (new_access && !ValidMrAccess(unsigned(access)))) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  void* to_addr = translation ? addr : ibmr->addr;
  size_t to_length = translation ? length : ibmr->length;
  // A new translation is at its own address; an unchanged one keeps the iova it had.
  uint64_t to_iova = translation ? reinterpret_cast<uintptr_t>(addr) : mr->iova;
  SimPd* from_pd = mr->protection_domain;
  SimPd* to_pd = new_pd ? Protection(pd) : from_pd;
  int to_access = new_access ? access : mr->access;
  if (translation || new_access) {
    if (int error = PinRange(to_addr, to_length, unsigned(to_access)); error != 0) {
      errno = error;
      return IBV_REREG_MR_ERR_INPUT;
    }
  }
  Device* dev = ToSim(ibmr->context)->device;
  if (!dev->ReregisterMr(mr, to_pd, to_addr, to_length, to_iova, to_access)) {
    errno = EBUSY;  // memory windows are bound to it
    return IBV_REREG_MR_ERR_CMD;
  }
  if (to_pd != from_pd) {
    to_pd->users.fetch_add(1);
    from_pd->users.fetch_sub(1);
    ibmr->pd = pd;
  }
  return 0;
}

}  // extern "C"
