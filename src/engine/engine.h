// Engine: one RC queue pair and everything that drives it (paper sections 5.3, 5.4 and 6).
//
// Channels: many logical sockets share one engine (QP multiplexing, section 6.1). Each channel
// keeps its own message order and boundaries; the connecting side opens channels with a control
// message and either side closes them.
//
// Sending: each channel queues its messages in order and sends them one at a time. A message up
// to the peer's eager limit goes as one SEND_WITH_IMM straight from the application's Buffer. A
// larger one goes by rendezvous (Figure 6): a request carrying its size, a reply carrying the
// destination address and rkey that the receiver allocated from bemalloc, then RDMA WRITE
// fragments of `fragment_bytes` to p, p+S, ..., the last one a WRITE_WITH_IMM whose receive
// completion tells the receiver the message is whole. Since a channel's next message starts only
// after its previous one's last request is posted, the receiver delivers in order per channel
// with no reordering buffer. The requests of the rendezvous messages queued right behind the one
// under way go ahead of it (up to `rendezvous_ahead_bytes` per engine), so that their replies are
// in when their turn comes: otherwise a stream of mid-size messages on one channel waits a
// round trip between every two (64 KiB messages ran at 0.63x TCP's rate so).
//
// Scheduling: when the work-request chain has free slots, a FragmentScheduler (deficit
// round-robin by bytes) picks the next channel with work; it prepares small messages up to its
// quantum or exactly one fragment, so large messages of several channels interleave fragment by
// fragment and a small message waits behind at most one fragment per busy channel. Control
// replies (rendezvous replies, channel opens and closes) go ahead of data.
//
// Bounds: every SEND / WRITE_WITH_IMM spends a receive credit (SendCredits); every request's
// payload counts against the SendWindow until its completion retires it. Both are checked before
// a request is prepared, so the chain never holds what either forbids.
//
// Receiving: `recv_queue_depth` receives are posted, each into an eager-limit Buffer from
// bemalloc. An eager message's buffer is handed to the application as is (no copy) and a fresh
// one takes its place when the batch of k = depth/2 is reposted.
//
// Scoped remote writes (EngineConfig::scoped_remote_writes): a rendezvous destination is
// reachable only through a type 2 memory window bound to exactly its bytes. The window is bound
// on our send queue ahead of the reply that carries its rkey, and invalidated (LOCAL_INV) when
// the last fragment or an abort arrives; the buffer reaches the application (or is freed) only
// once the invalidate has completed. Later events of the same channel (eager messages, remote
// writes, the peer's close) wait behind it, so per-channel order is kept. Windows come from a
// per-engine pool and are reused. Without window support the reply carries the region's rkey.
//
// Threads: constructed anywhere; from Start() on, every method runs on the owning I/O thread.
// Once the engine is on a thread (EnginePoller::AddEngine), the channel, send and completion
// methods check that in Debug and sanitizer builds (BX_DCHECK, base/dcheck.h).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/loop_tasks.h"
#include "bx/buffer.h"
#include "bx/status.h"
#include "engine/window_pool.h"
#include "engine/wire.h"
#include "flow_control/fragment_scheduler.h"
#include "flow_control/receive_credits.h"
#include "flow_control/send_window.h"
#include "flow_control/work_request_chain.h"
#include "verbs/verbs.h"

namespace bx::engine {

// The flow-control classes the engine drives (src/flow_control), under their own names here.
using flow_control::CreditReturner;
using flow_control::FragmentScheduler;
using flow_control::SendCredits;
using flow_control::SendWindow;
using flow_control::WorkRequestChain;

struct EngineConfig {
  // Send-queue depth = chain length. Shallow, as the paper runs (32): deep enough to keep a
  // 64 KiB-fragment stream at line rate, shallow enough to keep NIC state small.
  uint32_t send_queue_depth = 32;
  // Receive-queue depth d; also the credits the peer starts with. Reposted in batches of d/2.
  uint32_t recv_queue_depth = 64;
  // Largest message sent eagerly, and the size of each posted receive buffer (RdmaOptions says
  // why 20 KiB).
  uint32_t eager_limit = 20 << 10;
  // Rendezvous fragment size S: the unit the scheduler (and the send window) works in.
  uint32_t fragment_bytes = 64 << 10;
  // Software send window W: bytes posted and not yet completed, per engine; 0 turns it off.
  // Sized from the bandwidth-delay product: at 25 Gb/s a 2-tier RoCE fabric's round trip is
  // about 10 us, so one flow needs ~31 KB in flight to keep its link busy; completions come back
  // once per doorbell batch, which adds up to a fragment of lag. Two fragments (128 KiB) keep a
  // single engine at line rate while bounding what N engines can dump into one switch queue
  // during an incast to N x 128 KiB (see docs/SIMULATION.md for what the fabric model says).
  uint64_t send_window_bytes = 128 << 10;
  uint64_t max_message_bytes = uint64_t{1} << 30;
  // Rendezvous destinations through a memory window bound to exactly the buffer (see above);
  // off, or where the device has no type 2 windows, the peer gets the whole region's rkey.
  bool scoped_remote_writes = true;
  // Rendezvous messages announced ahead of the message under way on their channel, at most this
  // many bytes per engine and messages per channel: the peer allocates (and holds, with a memory
  // window each) their destinations that much earlier. A round trip of the exchange at the ~8
  // GB/s measured on the simnic is ~160 KB. 0 bytes announces none.
  uint64_t rendezvous_ahead_bytes = 1 << 20;
  uint32_t rendezvous_ahead_messages = 8;
};

// What the peer told us at connection set-up.
struct PeerLimits {
  uint32_t recv_queue_depth;  // our initial credits
  uint32_t eager_limit;       // its receive buffer size
  uint64_t max_message_bytes;
};

// A buffer the peer registered and described to us out of band: writes into it need no
// rendezvous. The public type (bx/buffer.h): the rdma socket checks a write against its length.
using bx::RemoteBuffer;

// What the engine calls when it is done with a message (sent, or with the reason it cannot
// be): the sender's callback, or, for a sender that accounts for its messages itself, its hook
// with the message's bytes and the callback. The hook saves wrapping the callback in another
// std::function (an allocation per message); `owner` is kept alive until it has run.
struct SendCompletion {
  using Callback = std::function<void(const Status&)>;
  using Hook = void (*)(void* owner, size_t bytes, Callback& done, const Status& status);

  SendCompletion() = default;
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, SendCompletion> &&
           std::is_constructible_v<Callback, F&&>) SendCompletion(F&& f)
      : done(std::forward<F>(f)) {}  // NOLINT: implicit, as a callback is
  SendCompletion(Callback callback, Hook hook, std::shared_ptr<void> owner, size_t bytes)
      : done(std::move(callback)), hook(hook), owner(std::move(owner)), bytes(bytes) {}
  // Moved from, a completion is empty (as a moved-from callback is): the engine moves it out of
  // a message before calling it, and must not call it twice.
  SendCompletion(SendCompletion&& other) noexcept
      : done(std::move(other.done)),
        hook(std::exchange(other.hook, nullptr)),
        owner(std::move(other.owner)),
        bytes(other.bytes) {
    other.done = nullptr;
  }
  SendCompletion& operator=(SendCompletion&& other) noexcept {
    done = std::move(other.done);
    other.done = nullptr;
    hook = std::exchange(other.hook, nullptr);
    owner = std::move(other.owner);
    bytes = other.bytes;
    return *this;
  }
  SendCompletion(const SendCompletion&) = delete;
  SendCompletion& operator=(const SendCompletion&) = delete;

  explicit operator bool() const { return hook != nullptr || done != nullptr; }
  void operator()(const Status& status) {
    if (hook != nullptr) {
      hook(owner.get(), bytes, done, status);
    } else if (done) {
      done(status);
    }
  }

  Callback done;
  Hook hook = nullptr;
  std::shared_ptr<void> owner;
  size_t bytes = 0;
};

// An application buffer with a "released" callback; the engine owns it until then.
struct OutgoingMessage {
  Buffer data;
  SendCompletion done;
};

struct EngineCounters {
  uint64_t messages_sent = 0, bytes_sent = 0, messages_received = 0, bytes_received = 0;
  // Messages that arrived for a channel this side had already closed (dropped, buffers freed).
  uint64_t messages_dropped = 0;
  uint64_t channels_open = 0, channels_opened = 0;
  // Send window: times a request waited for it, the largest outstanding byte count seen, and W.
  uint64_t window_stalls = 0, max_outstanding_bytes = 0, window_bytes = 0;
  uint64_t scheduler_rounds = 0;
  uint64_t eager_sent = 0, rendezvous_sent = 0, remote_writes = 0, fragments = 0;
  uint64_t rendezvous_ahead = 0;  // requests sent while an earlier message was under way
  uint64_t credit_stalls = 0, credit_updates_sent = 0, credits_received = 0;
  uint64_t rnr_events = 0;  // RNR-retry-exceeded completions: credits should make it stay 0
  uint64_t signalled_completions = 0, receive_batches_posted = 0;
  uint64_t batches = 0, requests_posted = 0;  // from the chain
  // Scoped remote writes: windows in the pool, binds and invalidates posted, and rendezvous
  // replies that carried a region rkey although scoping was asked for (no window available).
  uint64_t windows_allocated = 0, windows_bound = 0, windows_invalidated = 0;
  uint64_t unscoped_rendezvous = 0;
  std::map<std::string, uint64_t> ToMap() const;
};

class Engine {
 public:
  struct Callbacks {
    std::function<void(ChannelId, Buffer)> on_message;
    // Once, when the engine dies (QP error completion, protocol violation, allocation failure).
    std::function<void(const Status&)> on_failure;
    // A write into one of our known buffers (EnqueueWrite at the peer) has landed entirely.
    std::function<void(ChannelId, uint16_t tag)> on_remote_write;
    // The peer opened a channel (the accepting side). Answer AcceptChannel or CloseChannel.
    std::function<void(ChannelId)> on_channel_open;
    // The peer accepted a channel we opened.
    std::function<void(ChannelId)> on_channel_accepted;
    // The peer closed a channel: its queued sends have failed, nothing more arrives on it.
    std::function<void(ChannelId)> on_channel_closed;
    // Both sides have closed the channel: its id may be opened again.
    std::function<void(ChannelId)> on_channel_released;
    // Tracing (tests use it to check scheduling order): a data request of `channel` was just
    // prepared, `bytes` long; `last` when it is the message's final request.
    std::function<void(ChannelId, uint32_t bytes, bool last)> on_prepared;
    // Tracing (tests): a rendezvous reply granting the peer `target` (its length in bytes) for
    // its message `id` was just prepared.
    std::function<void(uint16_t id, RemoteBuffer target)> on_granted;
  };

  // `qp` is an RC QP in INIT (or later) whose both queues complete to the I/O thread's CQ; the
  // engine does not own it.
  Engine(verbs::Library& lib, ibv_qp* qp, const EngineConfig& config, Callbacks callbacks);
  // Fails the engine if it has not failed. Destroy it after the QP (Fail first while the QP
  // exists): a failed engine keeps every buffer the NIC may still touch until it is destroyed.
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
  // Opens `channel` (the connecting side numbers them): the peer hears of it before any of its
  // messages. FailedPrecondition if the id is still in use.
  Status OpenChannel(ChannelId channel);
  // Ends our side of `channel`: queued messages complete with `why`; a message already partly
  // sent finishes first (the peer holds a buffer for it). Idempotent.
  void CloseChannel(ChannelId channel, const Status& why);
  // The accepting side takes a channel the peer opened (on_channel_open).
  void AcceptChannel(ChannelId channel);
  bool ChannelOpen(ChannelId channel) const;
  size_t channel_count() const { return channels_.size(); }
  // Queues `message` on `channel`; `done` runs when it has left (or with the reason it cannot).
  void Enqueue(ChannelId channel, OutgoingMessage message);
  // Writes `message` straight into `target` (skipping the rendezvous exchange), in fragments,
  // then tells the peer's channel that `tag` landed; ordered with the channel's other messages.
  void EnqueueWrite(ChannelId channel, OutgoingMessage message, RemoteBuffer target, uint16_t tag);
  // The same for a message already in the engine's node (engine/outgoing.h), which a sender
  // on another thread allocates once and queues itself until it reaches the I/O thread.
  struct Outgoing;  // a message being sent (engine/outgoing.h)
  static std::unique_ptr<Outgoing> NewOutgoing(OutgoingMessage message);
  static std::unique_ptr<Outgoing> NewWrite(OutgoingMessage message, RemoteBuffer target,
                                            uint16_t tag);
  void Enqueue(ChannelId channel, std::unique_ptr<Outgoing> out);
  void OnCompletion(const ibv_wc& wc);
  // Moves queued work into the chain and posts it with one doorbell.
  void Pump();
  // Ends the engine: moves the QP to the error state; every queued or in-flight message completes
  // with `why`; on_failure runs (unless `notify` is false, when the owner is closing it on
  // purpose). Buffers that posted work requests name (sends, receives, rendezvous destinations)
  // stay allocated until the engine is destroyed: the NIC may use them until their flush.
  void Fail(const Status& why, bool notify = true);

  bool failed() const { return failed_; }
  // Whether rendezvous replies grant memory windows (config asked for it and the device has them).
  bool scoped_remote_writes() const { return windows_.enabled(); }
  const Status& failure() const { return failure_; }
  uint32_t qp_num() const { return qp_->qp_num; }
  EngineCounters counters() const;
  const SendCredits& send_credits() const { return credits_; }
  const SendWindow& send_window() const { return window_; }
  const WorkRequestChain& chain() const { return chain_; }

  // Whether a completion is on its way: requests in flight, or a rendezvous under way in either
  // direction (its data or reply will complete). An I/O thread polls through such waits.
  bool ExpectsCompletion() const {
    return !failed_ && (chain_.in_flight() > 0 || !rendezvous_.empty() || !incoming_.empty());
  }

 private:
  // The I/O thread's bookkeeping (EnginePoller): which engines to pump, which expect a
  // completion, and the loop the engine was added on.
  friend class EnginePoller;
  // The engine's code is split by concern, one file each:
  //   engine.cc           construction, completions (to the send or receive side), counters
  //   engine_send.cc      the send path: queueing, the pump, control messages, retiring
  //   engine_receive.cc   receives: reposting, dispatch by kind, handing events up in order
  //   engine_channels.cc  channel control: open, accept, close, release
  //   engine_failure.cc   failure
  //   window_pool.cc      the memory windows of scoped remote writes
  struct Channel;
  // What preparing a channel's next request came to.
  enum class Step { kGo, kNext, kBlocked };
  // A control message that goes ahead of data.
  struct Control {
    Kind kind;
    uint16_t id;
    RendezvousReply reply;    // kRendezvousReply only
    uint64_t length = 0;      // kRendezvousReply: the granted bytes
    WindowPool::Grant grant;  // kRendezvousReply: the window to bind first (window -1: none)
  };
  // A receive-side event of one channel, handed up in order: it waits behind a message whose
  // window is being invalidated.
  struct Held {
    enum class What : uint8_t { kMessage, kRemoteWrite, kPeerClose } what;
    Buffer buffer;        // kMessage
    uint16_t tag = 0;     // kRemoteWrite
    int32_t window = -1;  // waiting for this window's invalidate; -1 when ready
  };

  // Send path (engine_send.cc).
  void Push(ChannelId channel, std::unique_ptr<Outgoing> out);
  void PrepareControl();
  Step PumpChannel(ChannelId id);
  Step Admit(uint32_t bytes, bool spends_credit, uint32_t slots);
  void FinishMessage(ChannelId id, Channel& channel, WorkRequestChain::Slot& last);
  // Takes the channel's next message as the one under way (the queue's head).
  void StartNext(Channel& channel);
  // Sends the request of rendezvous message `out` of `channel` (checks done by the caller).
  void PrepareRendezvousRequest(ChannelId channel, Outgoing& out);
  // Announces the rendezvous messages queued right behind the one under way, within
  // rendezvous_ahead_bytes and what credits, chain and window allow now.
  void AnnounceAhead(ChannelId id, Channel& channel);
  uint16_t AllocateRendezvousId();
  void PostPending();
  void OnSendCompletion(const ibv_wc& wc);
  void Retire(WorkRequestChain::Slot& slot, const Status& status);
  // Fills a slot for a SEND_WITH_IMM / WRITE_WITH_IMM, piggybacking owed credits.
  void PrepareImm(WorkRequestChain::Slot& slot, Kind kind, uint16_t id);
  // Sends `payload` (a wire struct) inline, from the slot's own bytes.
  template <typename WireStruct>
  void SetInline(WorkRequestChain::Slot& slot, const WireStruct& payload) {
    static_assert(std::is_trivially_copyable_v<WireStruct>);
    static_assert(sizeof(WireStruct) <= sizeof(slot.inline_payload),
                  "a wire struct must fit the work request's inline bytes");
    SetInlineBytes(slot, &payload, sizeof(WireStruct));
  }
  void SetInlineBytes(WorkRequestChain::Slot& slot, const void* payload, uint32_t size);

  // Receive path (engine_receive.cc). Each On<Kind> handles one received control or data
  // message and returns false if it was a protocol violation (the engine has failed).
  Status RepostReceives(uint32_t count);
  void OnReceive(const ibv_wc& wc);
  bool Dispatch(const Imm& imm, uint32_t slot, uint32_t byte_len);
  bool OnRendezvousRequest(uint16_t id, const Buffer& payload, uint32_t byte_len);
  bool OnRendezvousReply(uint16_t id, const Buffer& payload, uint32_t byte_len);
  bool OnRendezvousDone(uint16_t id);
  bool OnRendezvousAbort(uint16_t id);
  bool OnRemoteWriteDone(const Buffer& payload, uint32_t byte_len);
  bool OnPeerAccepted(ChannelId channel);
  // Hands `event` of `channel` up to the application now, or queues it behind held ones.
  void HandUp(ChannelId channel, Held event);
  void HandUpNow(ChannelId channel, Held& event);
  // Hands up the channel's held events up to the first one still waiting for an invalidate.
  void HandUpReleased(ChannelId channel);
  void Deliver(ChannelId channel, Buffer message);
  void OnRemoteWrite(ChannelId channel, uint16_t tag);
  void OnInvalidated(uint32_t window);

  // Channel control (engine_channels.cc).
  Channel* Find(ChannelId channel);
  void OnPeerOpened(ChannelId channel);
  void OnPeerClosed(ChannelId channel);
  void QueueClose(ChannelId id, Channel& channel);
  void MaybeRelease(ChannelId channel);

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
  uint64_t receives_posted_ = 0;

  SendWindow window_;
  FragmentScheduler scheduler_;
  bool window_blocked_ = false;  // a stall already counted for the current wait

  std::unordered_map<ChannelId, Channel> channels_;
  std::deque<Control> control_;
  // Our rendezvous messages between request and last fragment, by id: the channel they belong to.
  std::unordered_map<uint16_t, ChannelId> rendezvous_;
  uint16_t next_rendezvous_id_ = 1;
  // Messages announced ahead (request sent, still queued behind their channel's current one),
  // over all channels: their count and bytes.
  uint64_t ahead_messages_ = 0, ahead_bytes_ = 0;
  // Destinations allocated for the peer's rendezvous messages, by id.
  struct Incoming {
    ChannelId channel;
    Buffer buffer;
    int32_t window = -1;  // granted through this window, or -1 (region rkey)
  };
  std::unordered_map<uint16_t, Incoming> incoming_;
  // After Fail: buffers posted work requests named, freed with the engine (after the QP).
  std::vector<Buffer> nic_may_touch_;

  // Scoped remote writes: the window pool, the windows whose invalidate completed in the current
  // retiring pass, and channels whose receive events wait behind an invalidate.
  WindowPool windows_;
  std::vector<uint32_t> invalidated_;
  std::unordered_map<ChannelId, std::deque<Held>> held_;

  bool started_ = false;
  bool failed_ = false;
  // EnginePoller's: Pump is needed (the thread keeps a list of engines to pump); its last
  // reading of ExpectsCompletion (it counts the engines expecting one); the loop of the thread
  // the engine was added on (null before: no thread to check calls against).
  bool dirty_ = false;
  bool counted_expecting_ = false;
  const LoopTasks* home_ = nullptr;
  // Whether the caller may drive the engine: its thread, or any once that thread's loop ended.
  bool OnHomeThread() const { return home_ == nullptr || home_->OnLoopOrEnded(); }
  Status failure_;
  EngineCounters counters_;
};

}  // namespace bx::engine
