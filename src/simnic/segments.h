// Scatter/gather helpers: resolving SGEs against the MR table and copying between segment lists.
#pragma once

#include <infiniband/verbs.h>
#include <sys/uio.h>

#include <cstdint>

#include "simnic/device.h"
#include "simnic/sim_objects.h"

namespace bx::simnic {

// Resolves `n` SGEs (lkeys) of `pd` on `device` to host segments, checking that each lies inside
// its MR and that the MR grants `access`. Zero-length SGEs are skipped. False on any violation.
bool ResolveSges(const Device& device, SimPd* pd, const ibv_sge* sge, int n, int access, iovec* out,
                 int* out_count, uint64_t* total);

// A send WQE's local data as host segments: its inline copy, or its SGEs resolved on the QP's
// device and PD with `access` (IBV_ACCESS_LOCAL_WRITE for a read's sink). False on a violation.
bool ResolveSendData(const SimQp& qp, SendWqe& wqe, int access, iovec* out, int* out_count);

// A receive WQE's buffers as host segments, checked for local write against the PD of the queue
// it was posted to (the QP's SRQ, or the QP). False on a violation.
bool ResolveReceive(const SimQp& qp, const RecvWqe& wqe, iovec* out, int* out_count,
                    uint64_t* capacity);

// Copies min(total(dst), total(src)) bytes from src segments to dst segments as a NIC places a
// message: in increasing address order, packet by packet, the last bytes stored after all the
// others (with release ordering), so that once a poller sees the last byte, it sees them all.
void CopySegments(const iovec* dst, int dst_count, const iovec* src, int src_count);

}  // namespace bx::simnic
