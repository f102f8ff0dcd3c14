#include "simnic/segments.h"

#include <algorithm>
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

void CopySegments(const iovec* dst, int dst_count, const iovec* src, int src_count) {
  int di = 0, si = 0;
  size_t doff = 0, soff = 0;
  while (di < dst_count && si < src_count) {
    size_t n = std::min(dst[di].iov_len - doff, src[si].iov_len - soff);
    std::memcpy(static_cast<uint8_t*>(dst[di].iov_base) + doff,
                static_cast<const uint8_t*>(src[si].iov_base) + soff, n);
    doff += n;
    soff += n;
    if (doff == dst[di].iov_len) ++di, doff = 0;
    if (soff == src[si].iov_len) ++si, soff = 0;
  }
}

}  // namespace bx::simnic
