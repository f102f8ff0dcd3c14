#include "verbs/selfcheck.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <thread>
#include <utility>

#include "verbs/port_address.h"
#include "verbs/rc_connect.h"

namespace bx::verbs {
namespace {

using Clock = std::chrono::steady_clock;

// Each side's buffer is cut into one slot per operation so a stray write to the wrong place
// cannot pass for the right one.
constexpr size_t kBufferSize = 4096;
constexpr size_t kSlot = 1024;
constexpr size_t kSendSlot = 0 * kSlot, kWriteSlot = 1 * kSlot, kImmSlot = 2 * kSlot,
                 kReadSlot = 3 * kSlot;
// Odd lengths, different per operation, so byte_len cannot match by accident.
constexpr uint32_t kSendLength = 200, kWriteLength = 300, kImmLength = 400, kReadLength = 500;
constexpr uint32_t kImmValue = 0x12345678;

// Deregisters on destruction.
class MemoryRegion {
 public:
  MemoryRegion(Library& lib, ibv_mr* mr) : lib_(&lib), mr_(mr) {}
  MemoryRegion(MemoryRegion&& other) noexcept
      : lib_(other.lib_), mr_(std::exchange(other.mr_, nullptr)) {}
  MemoryRegion& operator=(MemoryRegion&&) = delete;
  ~MemoryRegion() {
    if (mr_ != nullptr) lib_->dereg_mr(mr_);
  }
  ibv_mr* get() const { return mr_; }

 private:
  Library* lib_;
  ibv_mr* mr_;
};

void FillPattern(uint8_t* data, size_t length, uint8_t seed) {
  for (size_t i = 0; i < length; ++i) data[i] = static_cast<uint8_t>(i * 7 + seed);
}

// "" when equal, else where they first differ.
std::string CompareBytes(const uint8_t* got, const uint8_t* want, size_t length) {
  auto [g, w] = std::mismatch(got, got + length, want);
  if (g == got + length) return "";
  return "byte " + std::to_string(g - got) + " is " + std::to_string(*g) + ", expected " +
         std::to_string(*w);
}

class SelfCheck {
 public:
  SelfCheck(Library& lib, const SelfCheckOptions& options) : lib_(lib), options_(options) {}

  SelfCheckReport Run() {
    report_.backend = std::string(BackendName(lib_.backend()));
    report_.library = lib_.path();
    if (SetUp()) {
      CheckSendRecv();
      CheckRdmaWrite();
      CheckWriteWithImm();
      CheckRdmaRead();
    }
    return std::move(report_);
  }

 private:
  struct Side {
    std::optional<Device> device;
    std::vector<uint8_t> buffer = std::vector<uint8_t>(kBufferSize);
    std::optional<MemoryRegion> mr;
    std::optional<RcQueuePair> qp;
    uint8_t port = 1;
    uint8_t* at(size_t offset) { return buffer.data() + offset; }
  };

  void Record(std::string name, bool passed, std::string detail) {
    report_.checks.push_back({std::move(name), passed, std::move(detail)});
  }

  bool Fail(std::string name, const Status& status) {
    Record(std::move(name), false, status.ToString());
    return false;
  }

  bool OpenSide(Side& side, const std::string& name) {
    Result<Device> device = Device::Open(lib_, name);
    if (!device.ok()) return Fail("open " + name, device.status());
    side.device.emplace(std::move(device).value());
    if (options_.port == 0) {
      Result<uint8_t> active = FirstActivePort(*side.device);
      if (!active.ok()) return Fail("open " + name, active.status());
      side.port = *active;
    } else {
      side.port = options_.port;
    }
    ibv_port_attr port = side.device->port(side.port);
    if (port.state != IBV_PORT_ACTIVE) {
      Record("open " + name, false,
             "port " + std::to_string(side.port) + " is " + lib_.port_state_str(port.state));
      return false;
    }
    Record("open " + name, true,
           "port " + std::to_string(side.port) + " active, gid " +
               FormatGid(side.device->gid(side.port)));
    return true;
  }

  bool SetUp() {
    if (!OpenSide(a_, options_.device_a) || !OpenSide(b_, options_.device_b)) return false;

    for (Side* side : {&a_, &b_}) {
      unsigned int access =
          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
      errno = 0;
      ibv_mr* mr = lib_.RegMr(side->device->pd(), side->buffer.data(), kBufferSize, access);
      if (mr == nullptr) {
        return Fail("register buffers",
                    Status::FromErrno(errno != 0 ? errno : EINVAL,
                                      "ibv_reg_mr(" + side->device->name() + ")"));
      }
      side->mr.emplace(lib_, mr);
    }
    Record("register buffers", true, std::to_string(kBufferSize) + " bytes on each device");

    QueuePairAttrs attrs;
    attrs.max_send_wr = 16;
    attrs.max_recv_wr = 16;
    attrs.cq_entries = 64;
    for (Side* side : {&a_, &b_}) {
      Result<RcQueuePair> qp =
          CreateRcQueuePair(lib_, side->device->context(), side->device->pd(), attrs);
      if (!qp.ok()) return Fail("connect rc", qp.status().WithContext(side->device->name()));
      side->qp.emplace(std::move(qp).value());
    }
    // Addressed as the transport addresses its connections (port_address.h): the RoCE v2 GID
    // BX_GID_INDEX or the table suggests, or the LID on InfiniBand.
    Result<int> override_index = GidIndexFromEnvironment(-1);
    if (!override_index.ok()) return Fail("connect rc", override_index.status());
    Result<PortAddress> address[2] = {
        ResolvePortAddress(*a_.device, a_.port, nullptr, *override_index),
        ResolvePortAddress(*b_.device, b_.port, nullptr, *override_index)};
    for (const Result<PortAddress>& a : address)
      if (!a.ok()) return Fail("connect rc", a.status());
    if (address[0]->link_layer != address[1]->link_layer)
      return Fail("connect rc", FailedPrecondition("the two ports have different link layers"));
    Status status = Status::Ok();
    Side* sides[2] = {&a_, &b_};
    for (int i = 0; i < 2 && status.ok(); ++i) {
      const PortAddress& mine = *address[i];
      const PortAddress& theirs = *address[1 - i];
      RcOptions rc;
      rc.mtu = std::min(mine.active_mtu, theirs.active_mtu);
      SetPath(mine, theirs.lid, theirs.gid, &rc);
      status = ConnectRc(lib_, sides[i]->qp->qp(), sides[i]->port, sides[1 - i]->qp->qp_num(),
                         theirs.gid, rc);
    }
    if (!status.ok()) return Fail("connect rc", status);
    Record("connect rc", true,
           "qp " + std::to_string(a_.qp->qp_num()) + " <-> qp " + std::to_string(b_.qp->qp_num()) +
               " (" + address[0]->reason + ")");
    return true;
  }

  // Waits for the next completion on `side`'s CQ.
  Result<ibv_wc> WaitCompletion(Side& side) {
    Clock::time_point deadline = Clock::now() + options_.completion_timeout;
    while (true) {
      ibv_wc wc{};
      int n = Library::PollCq(side.qp->cq(), 1, &wc);
      if (n < 0) return Status::FromErrno(-n > 0 ? -n : EIO, "ibv_poll_cq");
      if (n == 1) return wc;
      if (Clock::now() > deadline) {
        return Status(StatusCode::kDeadlineExceeded,
                      "no completion on " + side.device->name() + " within " +
                          std::to_string(options_.completion_timeout.count()) + " ms");
      }
      std::this_thread::yield();
    }
  }

  // "" when `wc` is the completion expected, else what is wrong with it.
  std::string CheckCompletion(const ibv_wc& wc, uint64_t wr_id, ibv_wc_opcode opcode,
                              std::optional<uint32_t> byte_len) {
    if (wc.status != IBV_WC_SUCCESS) {
      return std::string("status ") + lib_.wc_status_str(wc.status) + " (" +
             std::to_string(wc.status) + ")";
    }
    if (wc.wr_id != wr_id) {
      return "wr_id " + std::to_string(wc.wr_id) + ", expected " + std::to_string(wr_id);
    }
    if (wc.opcode != opcode) {
      return "opcode " + std::to_string(wc.opcode) + ", expected " + std::to_string(opcode);
    }
    if (byte_len && wc.byte_len != *byte_len) {
      return "byte_len " + std::to_string(wc.byte_len) + ", expected " + std::to_string(*byte_len);
    }
    return "";
  }

  // Polls one completion on `side` and checks it; "" when it is right.
  std::string ExpectCompletion(Side& side, uint64_t wr_id, ibv_wc_opcode opcode,
                               std::optional<uint32_t> byte_len, ibv_wc* out = nullptr) {
    Result<ibv_wc> wc = WaitCompletion(side);
    if (!wc.ok()) return wc.status().message();
    if (out != nullptr) *out = wc.value();
    std::string problem = CheckCompletion(wc.value(), wr_id, opcode, byte_len);
    return problem.empty() ? "" : side.device->name() + " completion: " + problem;
  }

  Status PostRecv(Side& side, uint64_t wr_id, size_t offset, uint32_t length) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(side.at(offset)), length, side.mr->get()->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (int rc = Library::PostRecv(side.qp->qp(), &wr, &bad); rc != 0) {
      return Status::FromErrno(rc, "ibv_post_recv(" + side.device->name() + ")");
    }
    return Status::Ok();
  }

  // Posts one signalled send WR from a_ (local bytes at `offset`, remote at the same offset of
  // b_'s buffer for RDMA operations).
  Status PostSend(ibv_wr_opcode opcode, uint64_t wr_id, size_t offset, uint32_t length,
                  uint32_t imm_host_order = 0) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(a_.at(offset)), length, a_.mr->get()->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm_host_order);
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b_.at(offset));
    wr.wr.rdma.rkey = b_.mr->get()->rkey;
    ibv_send_wr* bad = nullptr;
    if (int rc = Library::PostSend(a_.qp->qp(), &wr, &bad); rc != 0) {
      return Status::FromErrno(rc, "ibv_post_send(" + a_.device->name() + ")");
    }
    return Status::Ok();
  }

  void Finish(const std::string& name, const std::string& problem, std::string success_detail) {
    Record(name, problem.empty(), problem.empty() ? std::move(success_detail) : problem);
  }

  void CheckSendRecv() {
    const std::string name = "send/recv";
    FillPattern(a_.at(kSendSlot), kSendLength, 1);
    if (Status s = PostRecv(b_, 11, kSendSlot, kSlot); !s.ok()) return (void)Fail(name, s);
    if (Status s = PostSend(IBV_WR_SEND, 12, kSendSlot, kSendLength); !s.ok()) {
      return (void)Fail(name, s);
    }
    std::string problem = ExpectCompletion(a_, 12, IBV_WC_SEND, std::nullopt);
    if (problem.empty()) problem = ExpectCompletion(b_, 11, IBV_WC_RECV, kSendLength);
    if (problem.empty()) problem = CompareBytes(b_.at(kSendSlot), a_.at(kSendSlot), kSendLength);
    Finish(name, problem, std::to_string(kSendLength) + " bytes received intact");
  }

  void CheckRdmaWrite() {
    const std::string name = "rdma write";
    FillPattern(a_.at(kWriteSlot), kWriteLength, 2);
    if (Status s = PostSend(IBV_WR_RDMA_WRITE, 21, kWriteSlot, kWriteLength); !s.ok()) {
      return (void)Fail(name, s);
    }
    // An RC write completes at the requester only once the responder acknowledged it, so the
    // bytes must be in place now.
    std::string problem = ExpectCompletion(a_, 21, IBV_WC_RDMA_WRITE, std::nullopt);
    if (problem.empty()) {
      problem = CompareBytes(b_.at(kWriteSlot), a_.at(kWriteSlot), kWriteLength);
    }
    Finish(name, problem, std::to_string(kWriteLength) + " bytes placed");
  }

  void CheckWriteWithImm() {
    const std::string name = "write with imm";
    FillPattern(a_.at(kImmSlot), kImmLength, 3);
    // WRITE_WITH_IMM consumes a receive; the data goes where the WR says, not to this buffer.
    if (Status s = PostRecv(b_, 31, kSendSlot, kSlot); !s.ok()) return (void)Fail(name, s);
    if (Status s = PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 32, kImmSlot, kImmLength, kImmValue);
        !s.ok()) {
      return (void)Fail(name, s);
    }
    std::string problem = ExpectCompletion(a_, 32, IBV_WC_RDMA_WRITE, std::nullopt);
    ibv_wc received{};
    if (problem.empty()) {
      problem = ExpectCompletion(b_, 31, IBV_WC_RECV_RDMA_WITH_IMM, kImmLength, &received);
    }
    if (problem.empty() && (received.wc_flags & IBV_WC_WITH_IMM) == 0) {
      problem = "receive completion lacks IBV_WC_WITH_IMM";
    }
    if (problem.empty() && ntohl(received.imm_data) != kImmValue) {
      problem = "imm_data " + std::to_string(ntohl(received.imm_data)) + ", expected " +
                std::to_string(kImmValue);
    }
    if (problem.empty()) problem = CompareBytes(b_.at(kImmSlot), a_.at(kImmSlot), kImmLength);
    Finish(name, problem, std::to_string(kImmLength) + " bytes placed, imm 0x12345678 received");
  }

  void CheckRdmaRead() {
    const std::string name = "rdma read";
    FillPattern(b_.at(kReadSlot), kReadLength, 4);
    std::fill_n(a_.at(kReadSlot), kReadLength, uint8_t{0});
    if (Status s = PostSend(IBV_WR_RDMA_READ, 41, kReadSlot, kReadLength); !s.ok()) {
      return (void)Fail(name, s);
    }
    std::string problem = ExpectCompletion(a_, 41, IBV_WC_RDMA_READ, kReadLength);
    if (problem.empty()) problem = CompareBytes(a_.at(kReadSlot), b_.at(kReadSlot), kReadLength);
    Finish(name, problem, std::to_string(kReadLength) + " bytes read back");
  }

  Library& lib_;
  const SelfCheckOptions& options_;
  SelfCheckReport report_;
  Side a_, b_;
};

}  // namespace

int SelfCheckReport::passed() const {
  return static_cast<int>(
      std::count_if(checks.begin(), checks.end(), [](const CheckResult& c) { return c.passed; }));
}

int SelfCheckReport::failed() const {
  return static_cast<int>(checks.size()) - passed();
}

SelfCheckReport RunSelfCheck(const SelfCheckOptions& options) {
  Result<Library*> lib = Library::ForDevice(options.device_a);
  if (!lib.ok()) {
    SelfCheckReport report;
    report.checks.push_back({"load verbs library", false, lib.status().ToString()});
    return report;
  }
  return RunSelfCheck(*lib.value(), options);
}

SelfCheckReport RunSelfCheck(Library& lib, const SelfCheckOptions& options) {
  return SelfCheck(lib, options).Run();
}

}  // namespace bx::verbs
