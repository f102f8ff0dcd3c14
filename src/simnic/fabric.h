// The fabric: every simulated device of this process, the "hardware" thread that moves their data,
// and the links to simnic devices in other processes.
//
// One hardware thread per process runs the RC transport for all local devices: it transmits send
// work requests, plays the responder for incoming ones, and writes every completion. Being the
// only producer of completions keeps CQs single-producer and lock-free for the poller.
//
// Application threads reach the fabric through doorbells (Doorbell(), never blocking on the
// hardware) and through control operations (modify/destroy QP, fault injection) that take the
// hardware lock, so they never run concurrently with the hardware touching the same objects.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "base/thread_cpu_clock.h"
#include "simnic/device.h"
#include "simnic/fabric_partitions.h"
#include "simnic/ipc_link.h"
#include "simnic/sim_objects.h"

namespace bx::simnic {

// The outcome of one request as the responder answers it.
enum class Reply : uint8_t {
  kAck,
  kRnrNak,           // no receive posted: retry after the responder's RNR timer
  kRemoteAccess,     // rkey, bounds or access rights wrong
  kRemoteInvalid,    // message longer than the receive buffer, or an unsupported request
  kRemoteOp,         // the responder failed to place data (its receive SGEs were bad)
  kNoResponse,       // dropped: no such QP, wrong PSN, peer down; the requester times out
  kLocalProtection,  // requester side: a local SGE failed its lkey, bounds or access check
  kPending,          // requester side: sent to another process, the reply comes later
  kLocalLength,      // requester side: a UD send longer than the MTU
  kFlushed,          // requester side: the QP went to error meanwhile; the flush completed it
};

class Fabric {
 public:
  // The process-wide fabric, created on first use with BX_SIM_DEVICES devices (default 2).
  static Fabric& Get();

  std::vector<Device*> devices() const;
  Device* device(uint32_t index) const;
  uint32_t pid() const { return pid_; }

  // Starts the hardware thread (idempotent); called when a device is opened.
  void Start();

  // Application side: tells the hardware the QP has new work. Never blocks on the hardware: when
  // the hardware is idle, the ringing thread does the QP's next small requests itself (below);
  // otherwise the QP waits for the hardware thread.
  void Doorbell(SimQp* qp);

  // Control operations take this lock: the hardware thread is then between steps.
  class ControlLock {
   public:
    explicit ControlLock(Fabric& f);
    ~ControlLock();
    ControlLock(const ControlLock&) = delete;
    ControlLock& operator=(const ControlLock&) = delete;

   private:
    Fabric& fabric_;
  };

  // Queues the QP for the hardware (a doorbell that is never serviced inline); `wake`: wake the
  // hardware thread if it sleeps.
  void Enqueue(SimQp* qp, bool wake = true);
  // Under ControlLock: moves a QP to the error state and lets the hardware flush it.
  void FailQp(SimQp* qp, bool fatal_event);
  // Under ControlLock, before the application moves `qp` to error: the replies that had reached
  // this process complete the requests they answer first, as a NIC handles the packets it has
  // received before a later state change. Without this, a request whose ACK was in the reader's
  // queue or its socket was flushed when the peer, having seen the data, disconnected through a
  // connection manager (DAPL's dtest: the last RDMA WRITE flushed in 1 of 20 runs idle).
  void SettleArrivals(const SimQp* qp);
  // Under ControlLock: forgets a QP being destroyed (ready list, CQ entries).
  void ForgetQp(SimQp* qp);

  // Called by the IPC reader when frames arrive.
  void WakeHardware();

  // CPU time of the hardware threads (this process), nanoseconds.
  uint64_t HardwareCpuNs() const;

  // Reports an asynchronous event to every context open on the device.
  static void PostAsyncEvent(Device* device, ibv_event_type type, void* object);
  static void PostAsyncEvent(SimContext* context, ibv_event_type type, void* object);

 private:
  Fabric();
  void Run();
  bool RunOnce();
  // `timer_at_ns`: the earliest timer (0: none), read under hw_mu_ by the caller.
  void IdleWait(uint64_t seen_doorbells, uint64_t timer_at_ns);
  // The doorbell's fast path: services the ready QPs on the calling thread if the hardware is
  // idle (else the one working does).
  void ServiceInline();
  // After inline work (requeued QPs or new timers need the thread) or a control lock's release
  // (`only_if_queued`: doorbells rung meanwhile left QPs on the ready list).
  void WakeForPending(bool only_if_queued = false);
  // Services QPs taken off the ready list, each with `byte_budget` (ServiceQp).
  void ServiceBatch(const std::vector<SimQp*>& batch, uint64_t byte_budget);

  // Requester (rc_requester.cc). Transmits at most `byte_budget` bytes of payload, then leaves
  // the rest to the hardware thread.
  void ServiceQp(SimQp* qp, uint64_t byte_budget = UINT64_MAX);
  void StageWqe(SimQp* qp, SendWqe& wqe, uint64_t now);
  Reply Transmit(SimQp* qp, SendWqe& wqe, uint8_t* rnr_timer);
  void HandleReply(SimQp* qp, uint64_t index, Reply reply, uint8_t rnr_timer, uint64_t now);
  void ExecuteLocal(SimQp* qp, uint64_t index);  // a bind or local invalidate
  void CompleteSend(SimQp* qp, uint64_t index, ibv_wc_status status);
  void FailSend(SimQp* qp, uint64_t index, ibv_wc_status status);
  void EnterError(SimQp* qp, ibv_event_type event);
  void FlushQp(SimQp* qp);
  void ScheduleTimer(SimQp* qp, uint64_t at_ns);
  void RunTimers(uint64_t now);
  void OnIpcFrame(IpcFrame& frame);
  void OnIpcRequest(IpcFrame& frame);
  void OnIpcReply(IpcFrame& frame);
  void OnIpcPeerLost(uint32_t pid);
  // Under hw_mu_, with the link on: handles the frames and lost peers the reader has queued;
  // true when there were any.
  bool HandleArrivals();

  // Unreliable datagrams (ud_transport.cc).
  Reply TransmitDatagram(SimQp* qp, SendWqe& wqe);
  void OnIpcDatagram(IpcFrame& frame);

 public:
  // Responder (rc_responder.cc): executes one request arriving at `device`.
  struct Request {
    uint32_t dest_qpn;
    uint32_t src_qpn;
    ibv_gid src_gid;
    uint32_t psn;
    ibv_wr_opcode opcode;
    bool solicited;
    uint32_t imm_data;  // or, for SEND_WITH_INV, the rkey the responder invalidates
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t length;
    const iovec* source;  // SEND/WRITE payload segments
    int source_count;
    const iovec* sink;  // READ: where the response data goes
    int sink_count;
  };
  Reply Respond(Device* device, const Request& request, uint8_t* rnr_timer);
  bool SendIpcRequest(uint32_t pid, uint32_t device_index, const Request& request);

  // Unreliable datagrams (ud_transport.cc). A UD send completes once it has left the port,
  // whether or not anyone receives it.
  struct Datagram {
    uint32_t dest_qpn;
    uint32_t src_qpn;
    uint32_t qkey;
    bool with_imm;
    bool solicited;
    uint32_t imm_data;
    uint16_t src_lid;
    DatagramRoute route;
    uint32_t length;
    const iovec* payload;
    int payload_count;
  };
  // Receives one datagram arriving at `device` (or drops it).
  void DeliverDatagram(Device* device, const Datagram& datagram);

  // Writes one completion; false (and the CQ broken) on overrun.
  bool PushCompletion(SimCq* cq, const ibv_wc& wc, SimQp* qp, uint64_t retire_up_to, bool is_send,
                      bool solicited);

 private:
  uint32_t pid_;
  std::vector<std::unique_ptr<Device>> devices_;

  std::once_flag started_;
  std::thread thread_;
  ThreadCpuClock hardware_cpu_clock_;

  std::mutex hw_mu_;  // held by whoever plays the hardware: its thread, or a doorbell inline
  std::atomic<int> control_waiting_{0};
  bool inline_service_;                 // BX_SIM_INLINE (default on)
  uint64_t inline_bytes_;               // BX_SIM_INLINE_BYTES
  std::atomic<uint64_t> inline_ns_{0};  // CPU doorbells spent doing the hardware's work (sampled)
  std::atomic<uint64_t> inline_services_{0};  // doorbells serviced inline (sampling)

  std::mutex ready_mu_;
  std::condition_variable ready_cv_;
  std::vector<SimQp*> ready_;
  uint64_t ready_version_ = 0;  // QPs ever queued on ready_
  bool sleeping_ = false;
  bool ipc_wake_ = false;
  std::atomic<uint64_t> doorbell_seq_{0};

  // Timers (hardware thread): deadline, device index, QP number (looked up again on expiry).
  struct Timer {
    uint64_t at_ns;
    uint32_t device;
    uint32_t qpn;
    bool operator>(const Timer& o) const { return at_ns > o.at_ns; }
  };
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;

  std::unique_ptr<IpcLink> ipc_;
  FabricPartitions partitions_{pid_};  // BX_SIM_PARTITIONS
  uint64_t spin_ns_;
};

}  // namespace bx::simnic
