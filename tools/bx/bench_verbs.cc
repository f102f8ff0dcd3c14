// `bx bench verbs`: raw-verbs benchmarks in the spirit of perftest, through bx::verbs::Library
// only, between two devices of one process (bxsim0 <-> bxsim1 here, two ports of one host on
// hardware). They measure what the layers above are built on, so the numbers of `bx bench msg`
// can be read against them.
//
// write_lat  post-to-completion of one signalled RDMA WRITE: the clock starts before
//            ibv_post_send and stops when ibv_poll_cq returns its completion (which on RC means
//            the responder acknowledged it). One WR in flight. p50/p99/p999.
// send_lat   SEND/RECV ping-pong round trip, as ib_send_lat does it, but ONE thread drives both
//            QPs (A sends, B's receive completes, B reposts and answers, A's receive completes):
//            on a two-core machine a second polling thread would take the simnic's hardware
//            thread's core. The time is a full round trip (ib_send_lat prints half of it).
// write_bw   ib_write_bw: a window of outstanding RDMA WRITEs, one ibv_post_send per WR, every
//            Nth signalled (RC completes in order, so a signalled completion retires the
//            unsignalled WRs before it). GB/s (1e9 bytes) and messages/s.
//
// Host CPU per operation: process CPU time (CLOCK_PROCESS_CPUTIME_ID) over the measured loop,
// minus the CPU of the simnic's hardware threads (bxsim_hardware_cpu_ns; nothing on hardware),
// divided by the operations. Every test busy-polls, as perftest does, so this is at least the
// wall time per operation of the polling thread: it measures the poller, not only the verbs.
// write_bw therefore also reports post_ns_per_op, the time inside ibv_post_send per WR.
//
// Works on hardware too: device names come from the flags, the QPs carry a GRH (GID index 0 by
// default) so RoCE routes them, and the path MTU is the smaller active MTU of the two ports.
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "base/percentile.h"
#include "bench_common.h"
#include "bx/status.h"
#include "commands.h"
#include "verbs/rc_connect.h"
#include "verbs/verbs.h"

namespace bx::tools {
namespace {

using Clock = std::chrono::steady_clock;
using OrderedJson = nlohmann::ordered_json;  // keys in the order written

constexpr const char* kWriteLatency = "write_lat";
constexpr const char* kSendLatency = "send_lat";
constexpr const char* kWriteBandwidth = "write_bw";

const std::vector<size_t> kDefaultLatencySizes = {8, 4096, 64 << 10, 1 << 20};
const std::vector<size_t> kDefaultBandwidthSizes = {64 << 10, 1 << 20};

struct BenchVerbsOptions {
  bool json = false;
  std::string device_a = "bxsim0";  // requester of write_lat and write_bw
  std::string device_b = "bxsim1";
  int port = 1;
  int gid_index = 0;
  std::vector<std::string> tests = {kWriteLatency, kSendLatency, kWriteBandwidth};
  std::vector<size_t> sizes;  // empty: kDefaultLatencySizes / kDefaultBandwidthSizes per test
  int iterations = 0;         // latency samples per size; 0: chosen by size
  int messages = 0;           // write_bw messages per size; 0: chosen by size
  int window = 32;            // write_bw outstanding WRs, as ib_write_bw's default tx depth
  int signal_every = 8;       // every Nth send WR is signalled (write_bw and send_lat)
  // A completion that has not arrived after this long means the QP is stuck: fail, not hang.
  int completion_timeout_ms = 10000;
  // Each test and size stops after this long with the samples it has, so that a busy machine
  // (where everything is 10-1000x slower) still finishes the default run in about 20 s.
  double max_seconds = 1.5;
};

// Latency samples: 50000 for small messages (p999 from 50 samples), fewer as they grow, never
// fewer than 2000 (p999 from 2); on an idle simnic each size takes 0.1-0.3 s.
int LatencyIterations(const BenchVerbsOptions& options, size_t size) {
  if (options.iterations > 0) return options.iterations;
  return int(std::clamp<size_t>((size_t{1} << 30) / size, 2000, 50000));
}

// Bandwidth messages: 4 GiB worth, between 2000 and 500000 (0.1-0.2 s each on an idle simnic).
int BandwidthMessages(const BenchVerbsOptions& options, size_t size) {
  if (options.messages > 0) return options.messages;
  return int(std::clamp<size_t>((size_t{4} << 30) / size, 2000, 500000));
}

// Unmeasured round trips first: they fault in the pages, warm the caches and wake the simnic's
// hardware thread out of its sleep.
int WarmupIterations(int iterations) {
  return std::clamp(iterations / 10, 10, 1000);
}

struct VerbsResult {
  std::string test;
  size_t size = 0;
  std::optional<double> p50_us, p99_us, p999_us;
  std::optional<double> gbytes_per_sec, msgs_per_sec;
  uint64_t operations = 0;  // latency samples or bandwidth messages measured
  double host_cpu_ns_per_op = 0;
  // write_bw: wall time inside ibv_post_send per WR, what posting costs the caller apart from
  // the busy-polling that host_cpu_ns_per_op includes.
  std::optional<double> post_ns_per_op;
};

// One device with its buffer, MR and RC QP. The buffer holds two regions of `region` bytes: the
// source of what this side sends or writes, then the target of what the peer sends or writes.
struct Side {
  std::optional<verbs::Device> device;
  uint8_t* buffer = nullptr;
  size_t region = 0;
  ibv_mr* mr = nullptr;
  // send_lat: the wr_id of the newest send completion polled (its wr_ids only grow).
  uint64_t sends_completed = 0;
  std::optional<verbs::RcQueuePair> qp;

  const std::string& name() const { return device->name(); }
  uint8_t* source() const { return buffer; }
  uint8_t* target() const { return buffer + region; }
};

// Two connected QPs and the three tests. Call from one thread.
class VerbsBench {
 public:
  VerbsBench(verbs::Library& lib, const BenchVerbsOptions& options)
      : lib_(lib), options_(options), port_(uint8_t(options.port)) {}
  VerbsBench(const VerbsBench&) = delete;
  VerbsBench& operator=(const VerbsBench&) = delete;

  ~VerbsBench() {
    // QPs (and their CQs) before the MRs, the MRs before the PDs the devices own.
    for (Side* side : {&a_, &b_}) side->qp.reset();
    for (Side* side : {&a_, &b_}) {
      if (side->mr != nullptr) lib_.dereg_mr(side->mr);
      std::free(side->buffer);
      side->device.reset();
    }
  }

  Status SetUp(size_t max_size) {
    BX_RETURN_IF_ERROR(OpenSide(a_, options_.device_a, max_size));
    BX_RETURN_IF_ERROR(OpenSide(b_, options_.device_b, max_size));

    uint32_t max_qp_wr =
        uint32_t(std::min(a_.device->attr().max_qp_wr, b_.device->attr().max_qp_wr));
    verbs::QueuePairAttrs attrs;
    attrs.max_send_wr = std::min<uint32_t>(uint32_t(std::max(options_.window, 16)), max_qp_wr);
    attrs.max_recv_wr = std::min<uint32_t>(16, max_qp_wr);
    attrs.cq_entries = int(attrs.max_send_wr + attrs.max_recv_wr);
    if (uint32_t(options_.window) > attrs.max_send_wr) {
      return InvalidArgument("--window " + std::to_string(options_.window) + " exceeds max_qp_wr " +
                             std::to_string(max_qp_wr));
    }
    for (Side* side : {&a_, &b_}) {
      Result<verbs::RcQueuePair> qp =
          verbs::CreateRcQueuePair(lib_, side->device->context(), side->device->pd(), attrs);
      if (!qp.ok()) return qp.status().WithContext(side->name());
      side->qp.emplace(std::move(qp).value());
    }

    ibv_port_attr port_a = a_.device->port(port_);
    ibv_port_attr port_b = b_.device->port(port_);
    verbs::RcOptions rc;
    rc.gid_index = uint8_t(options_.gid_index);
    if (port_a.active_mtu != 0 && port_b.active_mtu != 0) {
      rc.mtu = std::min(port_a.active_mtu, port_b.active_mtu);
    }
    // A receive is always posted before its SEND, so RNR would be a bug: let it surface.
    rc.rnr_retry = 0;
    verbs::RcOptions to_b = rc, to_a = rc;
    to_b.remote_lid = port_b.lid;  // InfiniBand routes by LID; RoCE and the simnic by GID
    to_a.remote_lid = port_a.lid;
    // Both QPs to INIT, a receive posted on each (no SEND may arrive before one is), then RTS.
    // send_lat keeps exactly one receive posted per side from here on.
    for (Side* side : {&a_, &b_}) {
      BX_RETURN_IF_ERROR(verbs::MoveRcToInit(lib_, side->qp->qp(), port_, rc));
      BX_RETURN_IF_ERROR(PostReceive(*side));
    }
    BX_RETURN_IF_ERROR(verbs::MoveRcToRts(lib_, a_.qp->qp(), port_, b_.qp->qp_num(),
                                          b_.device->gid(port_, rc.gid_index), to_b));
    BX_RETURN_IF_ERROR(verbs::MoveRcToRts(lib_, b_.qp->qp(), port_, a_.qp->qp_num(),
                                          a_.device->gid(port_, rc.gid_index), to_a));
    return Status::Ok();
  }

  std::string description() const {
    return a_.name() + " (qp " + std::to_string(a_.qp->qp_num()) + ") <-> " + b_.name() + " (qp " +
           std::to_string(b_.qp->qp_num()) + ")";
  }

  Result<VerbsResult> WriteLatency(size_t size) {
    const int iterations = LatencyIterations(options_, size);
    ibv_sge sge = Sge(a_, size);
    ibv_send_wr wr = Write(sge, /*wr_id=*/1, /*signaled=*/true);
    std::vector<uint64_t> samples(static_cast<size_t>(iterations));
    ibv_wc wc[4];
    uint64_t cpu_start = 0, hardware_start = 0;
    Clock::time_point deadline{};
    for (int i = -WarmupIterations(iterations); i < iterations; ++i) {
      if (i == 0) {
        cpu_start = ProcessCpuNs();
        hardware_start = HardwareCpuNs();
        deadline = Deadline();
      }
      Clock::time_point start = Clock::now();
      BX_RETURN_IF_ERROR(Post(a_, &wr));
      Result<int> n = PollSome(a_, wc, 4);
      Clock::time_point end = Clock::now();
      if (!n.ok()) return n.status();
      if (i < 0) continue;
      samples[size_t(i)] = uint64_t((end - start).count());
      if (end > deadline) {
        samples.resize(size_t(i) + 1);
        break;
      }
    }
    return LatencyResult(kWriteLatency, size, std::move(samples), cpu_start, hardware_start);
  }

  Result<VerbsResult> SendLatency(size_t size) {
    const int iterations = LatencyIterations(options_, size);
    ibv_sge a_sge = Sge(a_, size), b_sge = Sge(b_, size);
    std::vector<uint64_t> samples(static_cast<size_t>(iterations));
    const int warmup = WarmupIterations(iterations);
    uint64_t cpu_start = 0, hardware_start = 0;
    Clock::time_point deadline{};
    for (int i = -warmup; i < iterations; ++i) {
      if (i == 0) {
        cpu_start = ProcessCpuNs();
        hardware_start = HardwareCpuNs();
        deadline = Deadline();
      }
      const bool last = i == iterations - 1 || (i >= 0 && Clock::now() > deadline);
      // Selective signalling keeps the send queue from filling with unretired WRs; the last
      // send is signalled so that its completion can be waited for below.
      ++sends_;
      bool signaled = sends_ % uint64_t(options_.signal_every) == 0 || last;
      ibv_send_wr a_wr = Send(a_sge, sends_, signaled), b_wr = Send(b_sge, sends_, signaled);
      Clock::time_point start = Clock::now();
      BX_RETURN_IF_ERROR(Post(a_, &a_wr));
      BX_RETURN_IF_ERROR(WaitReceive(b_, size));
      BX_RETURN_IF_ERROR(PostReceive(b_));
      BX_RETURN_IF_ERROR(Post(b_, &b_wr));
      BX_RETURN_IF_ERROR(WaitReceive(a_, size));
      BX_RETURN_IF_ERROR(PostReceive(a_));
      Clock::time_point end = Clock::now();
      if (i >= 0) samples[size_t(i)] = uint64_t((end - start).count());
      if (last) {
        samples.resize(size_t(i) + 1);
        break;
      }
    }
    // A receive completion says the SEND arrived, not that its acknowledgement did: wait for the
    // last send completions so that no stale one lands in the next test's polls.
    BX_RETURN_IF_ERROR(WaitSendCompletion(a_, sends_));
    BX_RETURN_IF_ERROR(WaitSendCompletion(b_, sends_));
    return LatencyResult(kSendLatency, size, std::move(samples), cpu_start, hardware_start);
  }

  Result<VerbsResult> WriteBandwidth(size_t size) {
    uint64_t total = uint64_t(BandwidthMessages(options_, size));
    const uint64_t window = uint64_t(options_.window);
    ibv_sge sge = Sge(a_, size);
    ibv_wc wc[16];
    // A few windows unmeasured, for the same reasons as the latency warm-up.
    uint64_t post_ns = 0;
    uint64_t warmup = std::min<uint64_t>(total, 8 * window);
    BX_RETURN_IF_ERROR(WriteStream(sge, &warmup, wc, &post_ns, Clock::time_point::max()));
    post_ns = 0;
    uint64_t cpu_start = ProcessCpuNs(), hardware_start = HardwareCpuNs();
    Clock::time_point start = Clock::now();
    BX_RETURN_IF_ERROR(WriteStream(sge, &total, wc, &post_ns, Deadline()));
    Clock::time_point end = Clock::now();
    uint64_t cpu = CpuSince(cpu_start, hardware_start);
    double seconds = std::chrono::duration<double>(end - start).count();
    VerbsResult result;
    result.test = kWriteBandwidth;
    result.size = size;
    result.msgs_per_sec = double(total) / seconds;
    result.gbytes_per_sec = double(total) * double(size) / seconds / 1e9;
    result.operations = total;
    result.host_cpu_ns_per_op = double(cpu) / double(total);
    result.post_ns_per_op = double(post_ns) / double(total);
    return result;
  }

 private:
  Status OpenSide(Side& side, const std::string& name, size_t max_size) {
    BX_ASSIGN_OR_RETURN(verbs::Device device, verbs::Device::Open(lib_, name));
    side.device.emplace(std::move(device));
    ibv_port_attr port = side.device->port(port_);
    if (port.state != IBV_PORT_ACTIVE) {
      return Unavailable(name + " port " + std::to_string(port_) + " is " +
                         lib_.port_state_str(port.state));
    }
    if (port.max_msg_sz != 0 && max_size > port.max_msg_sz) {
      return InvalidArgument(std::to_string(max_size) + " bytes exceeds " + name +
                             "'s max_msg_sz " + std::to_string(port.max_msg_sz));
    }
    // Plain page-aligned memory, faulted in before registration as an application's would be.
    side.region = (max_size + 4095) / 4096 * 4096;
    side.buffer = static_cast<uint8_t*>(std::aligned_alloc(4096, 2 * side.region));
    if (side.buffer == nullptr) return ResourceExhausted("aligned_alloc " + name);
    std::memset(side.buffer, 0x5a, 2 * side.region);
    errno = 0;
    side.mr = lib_.RegMr(side.device->pd(), side.buffer, 2 * side.region,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (side.mr == nullptr) {
      return Status::FromErrno(errno != 0 ? errno : EINVAL, "ibv_reg_mr(" + name + ")");
    }
    return Status::Ok();
  }

  Clock::time_point Deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(options_.max_seconds));
  }

  uint64_t HardwareCpuNs() const {
    return lib_.sim().hardware_cpu_ns != nullptr ? lib_.sim().hardware_cpu_ns() : 0;
  }

  // Host CPU since the two readings: the process minus the simnic's hardware threads.
  uint64_t CpuSince(uint64_t cpu_start, uint64_t hardware_start) const {
    uint64_t cpu = ProcessCpuNs() - cpu_start;
    uint64_t hardware = HardwareCpuNs() - hardware_start;
    return cpu > hardware ? cpu - hardware : 0;
  }

  VerbsResult LatencyResult(const char* test, size_t size, std::vector<uint64_t> samples,
                            uint64_t cpu_start, uint64_t hardware_start) const {
    uint64_t cpu = CpuSince(cpu_start, hardware_start);
    VerbsResult result;
    result.test = test;
    result.size = size;
    result.p50_us = double(Percentile(samples, 0.50)) / 1000.0;
    result.p99_us = double(Percentile(samples, 0.99)) / 1000.0;
    result.p999_us = double(Percentile(samples, 0.999)) / 1000.0;
    result.operations = samples.size();
    result.host_cpu_ns_per_op = double(cpu) / double(samples.size());
    return result;
  }

  static ibv_sge Sge(const Side& side, size_t size) {
    return ibv_sge{reinterpret_cast<uintptr_t>(side.source()), uint32_t(size), side.mr->lkey};
  }

  // An RDMA WRITE from a_'s source region to b_'s target region.
  ibv_send_wr Write(ibv_sge& sge, uint64_t wr_id, bool signaled) const {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b_.target());
    wr.wr.rdma.rkey = b_.mr->rkey;
    return wr;
  }

  static ibv_send_wr Send(ibv_sge& sge, uint64_t wr_id, bool signaled) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    return wr;
  }

  Status Post(Side& side, ibv_send_wr* wr) {
    ibv_send_wr* bad = nullptr;
    if (int rc = verbs::Library::PostSend(side.qp->qp(), wr, &bad); rc != 0) {
      return Status::FromErrno(rc, "ibv_post_send(" + side.name() + ")");
    }
    return Status::Ok();
  }

  // Posts one receive covering `side`'s whole target region, so that it fits any size.
  Status PostReceive(Side& side) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(side.target()), uint32_t(side.region), side.mr->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (int rc = verbs::Library::PostRecv(side.qp->qp(), &wr, &bad); rc != 0) {
      return Status::FromErrno(rc, "ibv_post_recv(" + side.name() + ")");
    }
    return Status::Ok();
  }

  // Busy-polls `side`'s CQ until it returns at least one completion; all must be successful.
  Result<int> PollSome(Side& side, ibv_wc* wc, int capacity) {
    // Reading the clock on every empty poll would slow the poll; every 4096th costs nothing.
    Clock::time_point deadline{};
    for (uint32_t empty = 0;; ++empty) {
      int n = verbs::Library::PollCq(side.qp->cq(), capacity, wc);
      if (n < 0) return Status::FromErrno(-n > 0 ? -n : EIO, "ibv_poll_cq(" + side.name() + ")");
      if (n > 0) {
        for (int i = 0; i < n; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS) {
            return Aborted(side.name() + " qp " + std::to_string(wc[i].qp_num) + " completion " +
                           lib_.wc_status_str(wc[i].status) + " (opcode " +
                           std::to_string(wc[i].opcode) + ", vendor_err " +
                           std::to_string(wc[i].vendor_err) + ")");
          }
        }
        return n;
      }
      if (empty % 4096 == 4095) {
        Clock::time_point now = Clock::now();
        if (deadline == Clock::time_point{}) {
          deadline = now + std::chrono::milliseconds(options_.completion_timeout_ms);
        } else if (now > deadline) {
          return Status(StatusCode::kDeadlineExceeded,
                        "no completion on " + side.name() + " within " +
                            std::to_string(options_.completion_timeout_ms) + " ms");
        }
      }
    }
  }

  // Polls until a receive completes on `side`; send completions met on the way are retired.
  Status WaitReceive(Side& side, size_t size) {
    ibv_wc wc[1];
    while (true) {
      // One at a time, so that nothing after the receive is taken from the CQ here.
      BX_RETURN_IF_ERROR(PollSome(side, wc, 1).status());
      if (wc[0].opcode == IBV_WC_SEND) side.sends_completed = wc[0].wr_id;
      if (wc[0].opcode == IBV_WC_RECV) {
        if (wc[0].byte_len != size) {
          return DataLoss(side.name() + " received " + std::to_string(wc[0].byte_len) +
                          " bytes, expected " + std::to_string(size));
        }
        return Status::Ok();
      }
    }
  }

  // Polls `side` until the send WR `wr_id` (signalled) has completed, perhaps already seen by
  // WaitReceive. No receive can be among these completions: send_lat ends with none due.
  Status WaitSendCompletion(Side& side, uint64_t wr_id) {
    ibv_wc wc[4];
    while (side.sends_completed < wr_id) {
      BX_ASSIGN_OR_RETURN(int n, PollSome(side, wc, 4));
      for (int i = 0; i < n; ++i) {
        if (wc[i].opcode == IBV_WC_SEND) side.sends_completed = wc[i].wr_id;
      }
    }
    return Status::Ok();
  }

  // `count` WRITEs of `size` bytes with at most options_.window outstanding. The wr_id of a
  // signalled WR is how many WRs have been posted up to and including it, so its completion
  // says how many are done.
  // Adds the time spent posting to *post_ns: one clock pair per batch of posts (signal_every
  // WRs in the steady state), so the clock adds a few ns per WR, not tens. Past `deadline` it
  // posts one last, signalled WR and leaves in *count_inout how many it wrote.
  Status WriteStream(ibv_sge& sge, uint64_t* count_inout, ibv_wc* wc, uint64_t* post_ns,
                     Clock::time_point deadline) {
    const uint64_t window = uint64_t(options_.window);
    const uint64_t signal_every = uint64_t(options_.signal_every);
    uint64_t& count = *count_inout;
    uint64_t posted = 0, completed = 0;
    while (completed < count) {
      if (posted < count && posted - completed < window) {
        Clock::time_point start = Clock::now();
        while (posted < count && posted - completed < window) {
          ++posted;
          bool signaled = posted % signal_every == 0 || posted == count;
          ibv_send_wr wr = Write(sge, posted, signaled);
          BX_RETURN_IF_ERROR(Post(a_, &wr));
        }
        *post_ns += uint64_t((Clock::now() - start).count());
      }
      BX_ASSIGN_OR_RETURN(int n, PollSome(a_, wc, 16));
      for (int i = 0; i < n; ++i) completed = std::max<uint64_t>(completed, wc[i].wr_id);
      if (posted < count && Clock::now() > deadline) count = posted + 1;
    }
    return Status::Ok();
  }

  verbs::Library& lib_;
  const BenchVerbsOptions& options_;
  const uint8_t port_;
  Side a_, b_;
  // SENDs posted by each side in all send_lat runs so far; the wr_id of the newest one.
  uint64_t sends_ = 0;
};

std::vector<size_t> SizesFor(const BenchVerbsOptions& options, const std::string& test) {
  if (!options.sizes.empty()) return options.sizes;
  return test == kWriteBandwidth ? kDefaultBandwidthSizes : kDefaultLatencySizes;
}

OrderedJson ToJson(const VerbsResult& r) {
  auto optional = [](const std::optional<double>& v) {
    return v ? OrderedJson(*v) : OrderedJson(nullptr);
  };
  return {{"test", r.test},
          {"size", r.size},
          {"p50_us", optional(r.p50_us)},
          {"p99_us", optional(r.p99_us)},
          {"p999_us", optional(r.p999_us)},
          {"gbytes_per_sec", optional(r.gbytes_per_sec)},
          {"msgs_per_sec", optional(r.msgs_per_sec)},
          {"host_cpu_ns_per_op", r.host_cpu_ns_per_op},
          {"operations", r.operations},
          {"post_ns_per_op", optional(r.post_ns_per_op)}};
}

std::string Cell(const std::optional<double>& v, int precision) {
  return v ? fmt::format("{:.{}f}", *v, precision) : "-";
}

void PrintTable(const std::vector<VerbsResult>& results) {
  fmt::print("{:<10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>12} {:>11} {:>8}\n", "test", "size", "p50_us",
             "p99_us", "p999_us", "GB/s", "msgs/s", "host_ns/op", "post_ns");
  for (const VerbsResult& r : results) {
    fmt::print("{:<10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>12} {:>11.0f} {:>8}\n", r.test, r.size,
               Cell(r.p50_us, 2), Cell(r.p99_us, 2), Cell(r.p999_us, 2), Cell(r.gbytes_per_sec, 3),
               Cell(r.msgs_per_sec, 0), r.host_cpu_ns_per_op, Cell(r.post_ns_per_op, 0));
  }
}

Status Validate(const BenchVerbsOptions& options) {
  for (size_t size : options.sizes) {
    if (size == 0 || size > (size_t{1} << 30)) {
      return InvalidArgument("--sizes: " + std::to_string(size) + " is not in [1, 1 GiB]");
    }
  }
  if (options.window < 1 || options.signal_every < 1 || options.signal_every > options.window) {
    return InvalidArgument("need 1 <= --signal-every <= --window");
  }
  if (!(options.max_seconds > 0)) return InvalidArgument("--max-seconds must be positive");
  if (options.port < 1 || options.port > 255) return InvalidArgument("--port must be in [1, 255]");
  if (options.gid_index < 0 || options.gid_index > 255) {
    return InvalidArgument("--gid-index must be in [0, 255]");
  }
  return Status::Ok();
}

// The 1-minute load average before the run (-1 when unknown). Both tests busy-poll and the
// simnic's hardware thread needs a core of its own: on a machine doing other work the polling
// thread and the hardware thread time-share and the percentiles measure the scheduler.
double LoadAverage() {
  double load = -1;
  if (FILE* file = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(file, "%lf", &load) != 1) load = -1;
    std::fclose(file);
  }
  return load;
}

Status RunBenchVerbs(const BenchVerbsOptions& options) {
  BX_RETURN_IF_ERROR(Validate(options));
  const double load = LoadAverage();
  if (load >= 1.0) {
    fmt::print(stderr,
               "bx bench verbs: load average {:.2f} before the run; other work on this machine "
               "inflates these numbers (most of all the latency tails)\n",
               load);
  }
  BX_ASSIGN_OR_RETURN(auto* lib, verbs::Library::ForDevice(options.device_a));

  size_t max_size = 1;
  for (const std::string& test : options.tests) {
    for (size_t size : SizesFor(options, test)) max_size = std::max(max_size, size);
  }
  VerbsBench bench(*lib, options);
  BX_RETURN_IF_ERROR(bench.SetUp(max_size));

  std::vector<VerbsResult> results;
  for (const std::string& test : options.tests) {
    for (size_t size : SizesFor(options, test)) {
      Result<VerbsResult> r = test == kWriteLatency  ? bench.WriteLatency(size)
                              : test == kSendLatency ? bench.SendLatency(size)
                                                     : bench.WriteBandwidth(size);
      if (!r.ok()) return r.status().WithContext(test + " at " + std::to_string(size) + " B");
      results.push_back(std::move(r).value());
    }
  }

  if (options.json) {
    OrderedJson out;
    out["results"] = OrderedJson::array();
    for (const VerbsResult& r : results) out["results"].push_back(ToJson(r));
    out["backend"] = std::string(verbs::BackendName(lib->backend()));
    out["library"] = lib->path();
    out["device_a"] = options.device_a;
    out["device_b"] = options.device_b;
    out["window"] = options.window;
    out["signal_every"] = options.signal_every;
    out["send_lat"] = "round trip; one thread drives both QPs";
    out["load_average"] = load;
    fmt::print("{}\n", out.dump(2));
    return Status::Ok();
  }
  fmt::print("bx bench verbs: {} backend ({}), {}\n", verbs::BackendName(lib->backend()),
             lib->path(), bench.description());
  fmt::print(
      "write_lat: post to completion, 1 in flight; send_lat: round trip, one thread drives both "
      "QPs; write_bw: window {}, signal every {}\n\n",
      options.window, options.signal_every);
  PrintTable(results);
  return Status::Ok();
}

}  // namespace

void AddBenchVerbsCommand(CLI::App* bench) {
  auto options = std::make_shared<BenchVerbsOptions>();
  CLI::App* command = bench->add_subcommand(
      "verbs", "Raw verbs, perftest-like: WRITE latency, SEND/RECV round trip, WRITE bandwidth");
  command->add_flag("--json", options->json, "Print JSON instead of the table");
  command->add_option("--device-a", options->device_a, "Requester device")->capture_default_str();
  command->add_option("--device-b", options->device_b, "Responder device")->capture_default_str();
  command->add_option("--port", options->port, "Port of both devices")->capture_default_str();
  command->add_option("--gid-index", options->gid_index, "Source GID index (RoCE: the GRH's)")
      ->capture_default_str();
  command
      ->add_option("--tests", options->tests,
                   "Which tests, repeatable: write_lat send_lat write_bw")
      ->check(CLI::IsMember({kWriteLatency, kSendLatency, kWriteBandwidth}));
  command
      ->add_option("--sizes", options->sizes,
                   "Message sizes for every test, e.g. 8 4KB 64KB 1MB (default: 8 B to 1 MiB for "
                   "latency, 64 KiB and 1 MiB for bandwidth)")
      ->transform(CLI::AsSizeValue(/*kb_is_1000=*/false));
  command->add_option("--iterations", options->iterations,
                      "Latency samples per size (default: 1000-20000 by size)");
  command->add_option("--messages", options->messages,
                      "write_bw messages per size (default: 2 GiB worth, 2000-200000)");
  command->add_option("--window", options->window, "write_bw outstanding WRITEs")
      ->capture_default_str();
  command->add_option("--signal-every", options->signal_every, "Signal every Nth send WR")
      ->capture_default_str();
  command
      ->add_option("--max-seconds", options->max_seconds,
                   "Stop each test and size after this long with the samples so far")
      ->capture_default_str();
  command
      ->add_option("--timeout-ms", options->completion_timeout_ms,
                   "Fail when a completion takes longer")
      ->capture_default_str();
  command->callback([options] {
    bx::Status status = RunBenchVerbs(*options);
    if (!status.ok()) {
      fmt::print(stderr, "bx bench verbs: {}\n", status.ToString());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace bx::tools
