// The libibverbs functions that need no device: rate conversions, fork-safety ranges, P_Key
// lookup, the sysfs helpers, in-order placement, and the copies between the kernel ABI's
// structures and the verbs ones. Exported so that no call falls through to the system library.
#include <endian.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "simnic/verbs_internal.h"

namespace {

// Each rate: its enum, its multiple of 2.5 Gb/s (0: none, as libibverbs gives none for the FDR
// and 64b/66b-encoded EDR/HDR rates), its Mb/s (utilities_test.cc checks both against rdma-core).
struct Rate {
  ibv_rate rate;
  int mult;
  int mbps;
};
constexpr Rate kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, 0, 14062},
    {IBV_RATE_56_GBPS, 0, 56250},       {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750},     {IBV_RATE_25_GBPS, 0, 25781},
    {IBV_RATE_100_GBPS, 0, 103125},     {IBV_RATE_200_GBPS, 0, 206250},
    {IBV_RATE_300_GBPS, 0, 309375},     {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

// madvise() over the whole pages of [base, base + size).
int AdviseRange(void* base, size_t size, int advice) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(base) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(base) + size + page - 1) & ~(page - 1);
  return madvise(reinterpret_cast<void*>(begin), end - begin, advice) == 0 ? 0 : errno;
}

void CopyGlobalRoute(ibv_global_route* dst, const ib_uverbs_global_route* src) {
  std::memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
  dst->flow_label = src->flow_label;
  dst->sgid_index = src->sgid_index;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
}

}  // namespace

extern "C" {

int ibv_rate_to_mult(ibv_rate rate) {
  for (const Rate& r : kRates)
    if (r.rate == rate) return r.mult != 0 ? r.mult : -1;
  return -1;
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (const Rate& r : kRates)
    if (r.mult != 0 && r.mult == mult) return r.rate;
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  for (const Rate& r : kRates)
    if (r.rate == rate) return r.mbps;
  return -1;
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const Rate& r : kRates)
    if (r.mbps == mbps) return r.rate;
  return IBV_RATE_MAX;
}

// Fork safety for a range: without ibv_fork_init nothing is asked of the kernel, as in
// libibverbs; with it, the range's pages are (not) copied into a child.
int ibv_dontfork_range(void* base, size_t size) {
  return ibv_is_fork_initialized() == IBV_FORK_ENABLED ? AdviseRange(base, size, MADV_DONTFORK) : 0;
}
int ibv_dofork_range(void* base, size_t size) {
  return ibv_is_fork_initialized() == IBV_FORK_ENABLED ? AdviseRange(base, size, MADV_DOFORK) : 0;
}

// The port's P_Key table holds the default full-membership key at index 0, as ibv_query_pkey
// reports.
int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  if (context == nullptr || !bx::simnic::ToSim(context)->device->PortExists(port_num)) {
    errno = EINVAL;
    return -1;
  }
  if (pkey == htobe16(0xffff)) return 0;
  errno = ENOENT;
  return -1;
}

// As libibverbs: $SYSFS_PATH (without a trailing slash) or /sys.
const char* ibv_get_sysfs_path() {
  static const std::string path = [] {
    const char* env = std::getenv("SYSFS_PATH");
    std::string p = env != nullptr && *env != '\0' ? env : "/sys";
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    return p;
  }();
  return path.c_str();
}

// Reads dir/file into buf (at most size bytes, a trailing newline dropped and the text
// terminated); the length, or -1 with errno.
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  if (dir == nullptr || file == nullptr || buf == nullptr || size == 0) {
    errno = EINVAL;
    return -1;
  }
  const std::string path = std::string(dir) + "/" + file;
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return -1;
  size_t n = std::fread(buf, 1, size - 1, f);
  std::fclose(f);
  if (n > 0 && buf[n - 1] == '\n') --n;
  buf[n] = '\0';
  return int(n);
}

// The simnic places every RDMA WRITE, READ and SEND in increasing address order, packet by
// packet (segments.cc), so a poller on a message's last byte sees the whole message.
int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
  if (qp == nullptr || flags != 0) return 0;
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_READ:
      return 1;
    default:
      return 0;
  }
}

// The kernel ABI's structures to and from the verbs ones (rdma-core's marshall.h, which Debian
// does not install, declares these).
void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
  CopyGlobalRoute(&dst->grh, &src->grh);
  dst->dlid = src->dlid;
  dst->sl = src->sl;
  dst->src_path_bits = src->src_path_bits;
  dst->static_rate = src->static_rate;
  dst->is_global = src->is_global;
  dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  dst->cur_qp_state = ibv_qp_state(src->cur_qp_state);
  dst->path_mtu = ibv_mtu(src->path_mtu);
  dst->path_mig_state = ibv_mig_state(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = src->qp_access_flags;
  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;
  ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
  ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  std::memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
  std::memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = int(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->reversible = int(src->reversible);
  dst->numb_path = src->numb_path;
  dst->pkey = src->pkey;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->mtu = uint8_t(src->mtu);
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time_selector = src->packet_life_time_selector;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
}

void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  std::memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
  std::memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = uint32_t(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->reversible = uint32_t(src->reversible);
  dst->mtu = src->mtu;
  dst->pkey = src->pkey;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->numb_path = src->numb_path;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time_selector = src->packet_life_time_selector;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
}

}  // extern "C"
