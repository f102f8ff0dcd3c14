// Engine: one RC queue pair and everything that drives it (paper sections 5.3 and 5.4).
//
// Sending: messages queue in order. A message up to the peer's eager limit goes as one
// SEND_WITH_IMM straight from the application's Buffer. A larger one goes by rendezvous
// (Figure 6): a request carrying its size, a reply carrying the destination address and rkey that
// the receiver allocated from bemalloc, then RDMA WRITE fragments of `fragment_bytes` to p, p+S,
// ..., the last one a WRITE_WITH_IMM whose receive completion tells the receiver the message is
// whole. Messages leave strictly in order, so the receiver delivers them in order with no
// reordering buffer. Every request goes through the WorkRequestChain (doorbell batching,
// selective signalling) and every SEND / WRITE_WITH_IMM spends a receive credit.
//
// Receiving: `recv_queue_depth` receives are posted, each into an eager-limit Buffer from
// bemalloc. An eager message's buffer is handed to the application as is (no copy) and a fresh
// one takes its place when the batch of k = depth/2 is reposted.
//
// Threads: constructed anywhere; from Start() on, every method runs on the owning I/O thread.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bx/buffer.h"
#include "bx/status.h"
#include "engine/receive_credits.h"
#include "engine/wire.h"
#include "engine/work_request_chain.h"
#include "verbs/verbs.h"

namespace bx::engine {

struct EngineConfig {
  // Send-queue depth = chain length. Shallow, as the paper runs (32): deep enough to keep a
  // 64 KiB-fragment stream at line rate, shallow enough to keep NIC state small.
  uint32_t send_queue_depth = 32;
  // Receive-queue depth d; also the credits the peer starts with. Reposted in batches of d/2.
  uint32_t recv_queue_depth = 64;
  // Largest message sent eagerly, and the size of each posted receive buffer.
  uint32_t eager_limit = 16 << 10;
  // Rendezvous fragment size S: the unit the scheduler (and the send window) works in.
  uint32_t fragment_bytes = 64 << 10;
  uint64_t max_message_bytes = uint64_t{1} << 30;
};

// What the peer told us at connection set-up.
struct PeerLimits {
  uint32_t recv_queue_depth;  // our initial credits
  uint32_t eager_limit;       // its receive buffer size
  uint64_t max_message_bytes;
};

// A buffer the peer registered and described to us out of band (a statically allocated tensor,
// say): writes into it need no rendezvous.
struct RemoteBuffer {
  uint64_t addr;
  uint32_t rkey;
};

// An application buffer with a "released" callback; the engine owns it until then.
struct OutgoingMessage {
  Buffer data;
  std::function<void(const Status&)> done;
};

struct EngineCounters {
  uint64_t messages_sent = 0, bytes_sent = 0, messages_received = 0, bytes_received = 0;
  uint64_t eager_sent = 0, rendezvous_sent = 0, remote_writes = 0, fragments = 0;
  uint64_t credit_stalls = 0, credit_updates_sent = 0, credits_received = 0;
  uint64_t rnr_events = 0;  // RNR-retry-exceeded completions: credits should make it stay 0
  uint64_t signalled_completions = 0, receive_batches_posted = 0;
  uint64_t batches = 0, requests_posted = 0;  // from the chain
  std::map<std::string, uint64_t> ToMap() const;
};

class Engine {
 public:
  struct Callbacks {
    std::function<void(Buffer)> on_message;
    // Once, when the engine dies (QP error completion, protocol violation, allocation failure).
    std::function<void(const Status&)> on_failure;
    // A write into one of our known buffers (EnqueueWrite at the peer) has landed entirely.
    std::function<void(uint16_t tag)> on_remote_write;
  };

  // `qp` is an RC QP in INIT (or later) whose both queues complete to the I/O thread's CQ; the
  // engine does not own it.
  Engine(verbs::Library& lib, ibv_qp* qp, const EngineConfig& config, Callbacks callbacks);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Posts the initial receives (before the peer may send: between INIT and the peer's RTS).
  Status PostInitialReceives();
  // The peer's limits, from the connection handshake; must precede Start.
  void SetPeer(const PeerLimits& peer);
  // The peer's QP is ready to receive: requests may go out from now on. Until then sends queue.
  void Start();
  bool started() const { return started_; }

  // I/O thread from here on.
  void Enqueue(OutgoingMessage message);
  // Writes `message` straight into `target` (skipping the rendezvous exchange), in fragments, the
  // last a WRITE_WITH_IMM carrying `tag`; ordered with the other messages of this engine.
  void EnqueueWrite(OutgoingMessage message, RemoteBuffer target, uint16_t tag);
  void OnCompletion(const ibv_wc& wc);
  // Moves queued work into the chain and posts it with one doorbell.
  void Pump();
  // Ends the engine: every queued or in-flight message completes with `why`; on_failure runs
  // (unless `notify` is false, when the owner is closing it on purpose).
  void Fail(const Status& why, bool notify = true);

  bool failed() const { return failed_; }
  const Status& failure() const { return failure_; }
  uint32_t qp_num() const { return qp_->qp_num; }
  EngineCounters counters() const;
  const SendCredits& send_credits() const { return credits_; }
  const WorkRequestChain& chain() const { return chain_; }

  // Marks whether Pump is needed (the I/O thread keeps a list of engines to pump).
  bool dirty = false;

 private:
  struct Outgoing;  // a message being sent

  void OnReceive(const ibv_wc& wc);
  void OnSendCompletion(const ibv_wc& wc);
  Status RepostReceives(uint32_t count);
  // Fills a slot for a SEND_WITH_IMM / WRITE_WITH_IMM, piggybacking owed credits.
  void PrepareImm(WorkRequestChain::Slot& slot, Kind kind, uint16_t id);
  void SetInline(WorkRequestChain::Slot& slot, const void* payload, uint32_t size);
  void Push(std::unique_ptr<Outgoing> out);
  bool PumpCurrent();
  void Retire(WorkRequestChain::Slot& slot, const Status& status);

  verbs::Library& lib_;
  ibv_qp* qp_;
  EngineConfig config_;
  Callbacks callbacks_;
  PeerLimits peer_{};

  WorkRequestChain chain_;
  SendCredits credits_{0};
  CreditReturner returner_;

  // Receive ring: slot i holds the buffer of the receive with sequence s where s % depth == i.
  std::vector<Buffer> receive_buffers_;
  std::vector<ibv_recv_wr> receive_wrs_;
  std::vector<ibv_sge> receive_sges_;
  uint64_t receives_completed_ = 0;
  uint64_t receives_posted_ = 0;

  std::deque<std::unique_ptr<Outgoing>> queue_;
  std::unique_ptr<Outgoing> current_;
  uint16_t next_rendezvous_id_ = 1;
  // Control replies to send (rendezvous replies), ahead of data.
  std::deque<std::pair<uint16_t, RendezvousReply>> replies_;
  // Destinations allocated for the peer's rendezvous messages, by id.
  std::unordered_map<uint16_t, Buffer> incoming_;

  bool started_ = false;
  bool failed_ = false;
  Status failure_;
  EngineCounters counters_;
};

}  // namespace bx::engine
