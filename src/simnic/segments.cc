#include "simnic/segments.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace bx::simnic {

bool ResolveSges(const Device& device, SimPd* pd, const ibv_sge* sge, int n, int access, iovec* out,
                 int* out_count, uint64_t* total) {
  int count = 0;
  uint64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    if (sge[i].length == 0) continue;
    auto mr = device.FindMr(sge[i].lkey);
    if (!mr || mr->protection_domain != pd || (mr->access & access) != access) return false;
    if (sge[i].addr < mr->iova || sge[i].addr + sge[i].length > mr->iova + mr->length) return false;
    out[count].iov_base = mr->host + (sge[i].addr - mr->iova);
    out[count].iov_len = sge[i].length;
    ++count;
    sum += sge[i].length;
  }
  *out_count = count;
  *total = sum;
  return true;
}

bool ResolveSendData(const SimQp& qp, SendWqe& wqe, int access, iovec* out, int* out_count) {
  if (wqe.inlined) {
    out[0] = iovec{wqe.inline_data, wqe.length};
    *out_count = wqe.length > 0 ? 1 : 0;
    return true;
  }
  uint64_t total = 0;
  return ResolveSges(*qp.device, qp.protection_domain, wqe.sge, wqe.num_sge, access, out, out_count,
                     &total);
}

bool ResolveReceive(const SimQp& qp, const RecvWqe& wqe, iovec* out, int* out_count,
                    uint64_t* capacity) {
  SimPd* pd = qp.srq != nullptr ? qp.srq->protection_domain : qp.protection_domain;
  return ResolveSges(*qp.device, pd, wqe.sge, wqe.num_sge, IBV_ACCESS_LOCAL_WRITE, out, out_count,
                     capacity);
}

namespace {

// A packet: data is placed in increasing address order in pieces of this size (the largest path
// MTU), as a NIC writes one packet after another.
constexpr size_t kPacketBytes = 4096;
// Stored last, one byte at a time with release stores: the bytes a program polls.
constexpr size_t kTailBytes = 8;

// Copies `n` bytes from the cursor positions on, in increasing address order.
void CopyRange(const iovec* dst, int dst_count, const iovec* src, int src_count, int& di,
               size_t& doff, int& si, size_t& soff, size_t n, bool bytewise) {
  while (n > 0 && di < dst_count && si < src_count) {
    size_t step = std::min({dst[di].iov_len - doff, src[si].iov_len - soff, n, kPacketBytes});
    auto* to = static_cast<uint8_t*>(dst[di].iov_base) + doff;
    const auto* from = static_cast<const uint8_t*>(src[si].iov_base) + soff;
    if (bytewise) {
      for (size_t i = 0; i < step; ++i) {
        std::atomic_ref<uint8_t>(to[i]).store(from[i], std::memory_order_release);
      }
    } else {
      std::memcpy(to, from, step);
    }
    n -= step;
    doff += step;
    soff += step;
    if (doff == dst[di].iov_len) ++di, doff = 0;
    if (soff == src[si].iov_len) ++si, soff = 0;
  }
}

size_t TotalBytes(const iovec* segments, int count) {
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += segments[i].iov_len;
  return total;
}

}  // namespace

void CopySegments(const iovec* dst, int dst_count, const iovec* src, int src_count) {
  const size_t total = std::min(TotalBytes(dst, dst_count), TotalBytes(src, src_count));
  const size_t body = total > kTailBytes ? total - kTailBytes : 0;
  int di = 0, si = 0;
  size_t doff = 0, soff = 0;
  CopyRange(dst, dst_count, src, src_count, di, doff, si, soff, body, /*bytewise=*/false);
  // The tail goes last, with release stores that order everything before them (not a
  // standalone fence: GCC rejects those under TSan). One memcpy per message would not do: glibc
  // stores a large copy's first vector after the rest, and `rep movsb` orders no stores within
  // itself, so a program spinning on the last byte (ib_write_lat, low-latency protocols) could
  // see it before earlier bytes.
  CopyRange(dst, dst_count, src, src_count, di, doff, si, soff, total - body, /*bytewise=*/true);
}

}  // namespace bx::simnic
