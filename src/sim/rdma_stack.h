// Simulated hosts running RDMA: one engine per (trainer, server) queue pair at each end (and per
// (victim client, server) pair, endpoint_map.h), driven by the production flow-control classes
// (bx::flow_control::SendWindow, FragmentScheduler, SendCredits, CreditReturner: the code the
// engine runs), over a simulated RNIC.
//
// Engine (software): messages leave in order. Up to the eager limit a message is one SEND; larger
// ones send a rendezvous request (RTS), wait for the reply (CTS) and then post WRITE fragments,
// the last a WRITE_WITH_IMM, as src/engine/engine.h describes. Every post passes the send window
// (bytes posted and not acknowledged), the send-queue depth and, for SEND / WRITE_WITH_IMM, a
// receive credit; the receiver's CreditReturner reposts in batches of depth/2 and returns
// credits piggybacked or in a credit message.
//
// RNIC (hardware): each host's port serves its QPs round-robin, one MTU cell at a time, each QP
// paced at its DCQCN rate. The receiver's NIC acknowledges each work request on its last cell
// (that ACK completes it at the sender and releases its window bytes) and sends a CNP for an
// ECN-marked cell at most once per cnp_interval per QP. The receiver learns a work request from its
// last cell alone (Packet's RDMA fields), never from the sender's memory, so a partitioned run
// (partition.h) needs nothing else. Single-threaded.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "flow_control/fragment_scheduler.h"
#include "flow_control/receive_credits.h"
#include "flow_control/send_window.h"
#include "sim/config.h"
#include "sim/dcqcn.h"
#include "sim/endpoint_map.h"
#include "sim/event_queue.h"
#include "sim/huge_page_allocator.h"
#include "sim/messages.h"
#include "sim/network.h"
#include "sim/stats.h"

namespace bx::sim {

class RdmaStack : public HostStack, public Transport {
 public:
  RdmaStack(const SimConfig& config, Network* network, EventQueue* events, MessageTable* messages,
            Stats* stats);
  void SetSink(MessageSink* sink) { sink_ = sink; }

  uint32_t Send(uint32_t from, uint32_t to, MessageKind kind, uint32_t bytes,
                TimeNs origin) override;
  uint32_t NextDataPacket(uint32_t host, TimeNs now, TimeNs* retry_at) override;
  bool HasData(uint32_t host) const override { return !rings_[host].empty(); }
  void OnPacket(uint32_t host, uint32_t packet) override;
  void Prefetch(const Packet& packet) override;
  // Window, credit and DCQCN totals into the stats.
  void Finish();

  // The DCQCN rate at `now` of the QP that sends from `from` to `to`, Mb/s (line rate if off).
  double CurrentRateMbps(uint32_t from, uint32_t to, TimeNs now);

  // The fragment size actually used (the window may shrink it; see EngineModelConfig).
  uint32_t fragment_bytes() const { return fragment_bytes_; }

 private:
  enum class Op : uint8_t { kSend, kWrite, kWriteWithImm };
  enum class What : uint8_t { kNone, kApp, kRts, kCts, kCredit };
  enum MessageState : uint8_t { kQueued, kAwaitCts, kWriting };

  struct WorkRequest {
    uint32_t next = UINT32_MAX;
    uint32_t bytes = 0;
    uint32_t sent = 0;
    uint32_t message = kNoMessage;
    uint32_t credits = 0;  // piggybacked credit return
    Op op = Op::kSend;
    What what = What::kNone;
  };
  struct WorkRequestList {
    uint32_t head = UINT32_MAX, tail = UINT32_MAX;
    bool empty() const { return head == UINT32_MAX; }
  };

  // One end of a QP: the NIC's send state for it and the software engine. The NIC's fields come
  // first, so that the hottest path (NextDataPacket, once per cell) reads one or two cache lines
  // of an endpoint among tens of thousands.
  struct Endpoint {
    Endpoint(const SimConfig& config, uint32_t fragment, double line_mbps);
    WorkRequestList nic;   // posted, cells still to transmit
    TimeNs next_send = 0;  // DCQCN pacing
    TimeNs last_cnp = -1;  // receiver side: last CNP sent for this QP
    uint32_t posted = 0;   // posted and not yet acknowledged (send-queue slots)
    bool in_ring = false;
    bool stalled = false;
    bool credit_message_queued = false;
    DcqcnRate dcqcn;
    flow_control::SendWindow window;
    flow_control::SendCredits credits;
    flow_control::CreditReturner returner;
    uint32_t message_head = kNoMessage, message_tail = kNoMessage;
    WorkRequestList control;  // CTS and credit messages waiting to be posted
    flow_control::FragmentScheduler scheduler;
  };

  uint32_t NewWorkRequest(const WorkRequest& wr);
  void Append(WorkRequestList& list, uint32_t id);
  uint32_t PopFront(WorkRequestList& list);
  void Pump(uint32_t endpoint);
  bool PumpControl(uint32_t endpoint);
  bool PumpMessage(uint32_t endpoint);
  void Post(uint32_t endpoint, uint32_t wr);
  void Stall(Endpoint& e);
  void Describe(const WorkRequest& wr, Packet* p);
  // A SEND or WRITE_WITH_IMM arrived whole (its last cell: `cell`).
  void Receive(uint32_t endpoint, const Packet& cell);
  void Complete(uint32_t endpoint, uint32_t wr);
  // `message`: an ACK's work request's message, a hint for Prefetch only (kNoMessage: none).
  void SendNicControl(uint32_t host, PacketType type, uint32_t dst, uint32_t flow, uint32_t ref,
                      uint32_t message = kNoMessage);

  const SimConfig& config_;
  Network* network_;
  EventQueue* events_;
  MessageTable* messages_;
  Stats* stats_;
  MessageSink* sink_ = nullptr;
  EndpointMap map_;
  uint32_t fragment_bytes_;
  std::vector<Endpoint, HugePageAllocator<Endpoint>>
      endpoints_;  // qp * 2 + (0 at the trainer, 1 at the server)
  std::vector<WorkRequest, HugePageAllocator<WorkRequest>> work_requests_;
  std::vector<uint32_t> free_work_requests_;
  // A ring entry carries its endpoint's next_send, so a scan past rate-limited QPs reads this
  // contiguous ring and not 85,808 scattered endpoints (the copy is exact: next_send changes
  // only while its endpoint is out of the ring).
  struct RingEntry {
    TimeNs next_send;
    uint32_t endpoint;
  };
  std::vector<std::deque<RingEntry>> rings_;  // by host: endpoints with cells to send
};

}  // namespace bx::sim
