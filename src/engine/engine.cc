#include "engine/engine.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "alloc/verbs_registrar.h"
#include "bx/bemalloc.h"
#include "bx/log.h"

namespace bx::engine {
namespace {

// Receive work requests carry this bit in wr_id: error completions have no reliable opcode, so
// the wr_id is what tells a failed receive from a failed send.
constexpr uint64_t kReceiveTag = uint64_t{1} << 63;

// Once per process: thousands of engines would otherwise repeat it.
void SayUnscopedOnce(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] {
    bx::Log(LogLevel::kWarning, "bexpress: scoped remote writes are off (" + why +
                                    "); rendezvous replies grant the whole bemalloc region's rkey");
  });
}

}  // namespace

struct Engine::Outgoing {
  OutgoingMessage message;
  enum class State { kQueued, kAwaitingReply, kWriting } state = State::kQueued;
  uint16_t id = 0;           // rendezvous id, or the tag of a known-target write
  uint64_t offset = 0;       // next byte to write (rendezvous)
  uint64_t remote_addr = 0;  // from the reply, or known in advance
  uint32_t rkey = 0;
  bool known_target = false;  // EnqueueWrite: no rendezvous, ends with a kRemoteWriteDone
  // Its channel closed mid-message: `done` has run; the rest of a rendezvous is replaced by a
  // kRendezvousAbort so that the peer frees the destination.
  bool abandoned = false;
  std::unique_ptr<Outgoing> next;  // the channel's queue
  uint64_t size() const { return message.data.size(); }
};

// A logical socket's sending state. Idle channels cost a few words: 10,000 sockets on one engine
// are 10,000 of these.
struct Engine::Channel {
  std::unique_ptr<Outgoing> head;  // messages not started yet, oldest first
  Outgoing* tail = nullptr;
  std::unique_ptr<Outgoing> current;  // the message being sent, until its last request is posted
  bool closing = false;               // our side has ended: no more sends, incoming dropped
  bool close_queued = false;          // our kChannelClose is in control_ (or sent)
  bool close_sent = false;
  bool peer_closed = false;

  bool has_work() const { return current != nullptr || head != nullptr; }
  void Append(std::unique_ptr<Outgoing> out) {
    Outgoing* raw = out.get();
    if (tail) {
      tail->next = std::move(out);
    } else {
      head = std::move(out);
    }
    tail = raw;
  }
  std::unique_ptr<Outgoing> PopFront() {
    std::unique_ptr<Outgoing> out = std::move(head);
    head = std::move(out->next);
    if (!head) tail = nullptr;
    return out;
  }
  // Completes every message not started with `why`.
  void FailQueued(const Status& why) {
    while (head) {
      auto out = PopFront();
      if (out->message.done) out->message.done(why);
    }
  }
};

std::map<std::string, uint64_t> EngineCounters::ToMap() const {
  return {{"messages_sent", messages_sent},
          {"bytes_sent", bytes_sent},
          {"messages_received", messages_received},
          {"bytes_received", bytes_received},
          {"messages_dropped", messages_dropped},
          {"channels_open", channels_open},
          {"channels_opened", channels_opened},
          {"eager_sent", eager_sent},
          {"rendezvous_exchanges", rendezvous_sent},
          {"remote_writes", remote_writes},
          {"fragments", fragments},
          {"credit_stalls", credit_stalls},
          {"credit_updates_sent", credit_updates_sent},
          {"credits_received", credits_received},
          {"window_stalls", window_stalls},
          {"max_outstanding_bytes", max_outstanding_bytes},
          {"window_bytes", window_bytes},
          {"scheduler_rounds", scheduler_rounds},
          {"signalled_completions", signalled_completions},
          {"receive_batches_posted", receive_batches_posted},
          {"batches_posted", batches},
          {"requests_posted", requests_posted},
          {"rnr_events", rnr_events},
          {"windows_allocated", windows_allocated},
          {"windows_bound", windows_bound},
          {"windows_invalidated", windows_invalidated},
          {"unscoped_rendezvous", unscoped_rendezvous}};
}

Engine::Engine(verbs::Library& lib, ibv_qp* qp, const EngineConfig& config, Callbacks callbacks)
    : lib_(lib),
      qp_(qp),
      config_(config),
      callbacks_(std::move(callbacks)),
      chain_(config.send_queue_depth),
      returner_(config.recv_queue_depth),
      receive_buffers_(config.recv_queue_depth),
      receive_wrs_(config.recv_queue_depth),
      receive_sges_(config.recv_queue_depth),
      window_(config.send_window_bytes),
      scheduler_(config.fragment_bytes) {
  if (config_.scoped_remote_writes) ProbeWindows();
}

// Windows need the device to have type 2 windows and bemalloc regions to be verbs MRs (with
// IBV_ACCESS_MW_BIND, as the registrar gives them). One window is allocated now, so a provider
// that advertises windows but cannot allocate them is found before the first rendezvous.
void Engine::ProbeWindows() {
  if (bemalloc::RegisteredDevice() == nullptr) {
    NoWindows("bemalloc regions are not verbs memory regions");
    return;
  }
  ibv_device_attr attr{};
  if (int rc = lib_.query_device(qp_->context, &attr); rc != 0) {
    NoWindows(std::string("ibv_query_device: ") + std::strerror(rc));
    return;
  }
  if (attr.max_mw <= 0) {
    NoWindows("the device has no memory windows (max_mw = 0)");
    return;
  }
  scoped_ = true;
  if (int32_t w = AcquireWindow(); w >= 0) free_windows_.push_back(uint32_t(w));
}

void Engine::NoWindows(const std::string& why) {
  scoped_ = false;
  SayUnscopedOnce(why);
}

// A window from the pool, or a new one; -1 when none can be allocated (the reply then carries
// the region rkey). A failure before any window exists turns scoping off for the engine.
int32_t Engine::AcquireWindow() {
  if (!free_windows_.empty()) {
    uint32_t w = free_windows_.back();
    free_windows_.pop_back();
    return int32_t(w);
  }
  errno = 0;
  ibv_mw* mw = verbs::Library::AllocMw(qp_->pd, IBV_MW_TYPE_2);
  if (mw == nullptr) {
    std::string why =
        std::string("ibv_alloc_mw(type 2): ") + std::strerror(errno != 0 ? errno : ENOMEM);
    if (windows_.empty()) {
      NoWindows(why);
    } else {
      SayUnscopedOnce(why + ", for some rendezvous");
    }
    return -1;
  }
  windows_.push_back(Window{mw, mw->rkey, false, 0, Buffer()});
  return int32_t(windows_.size() - 1);
}

void Engine::DeallocWindows() {
  // Deallocating a bound window invalidates it: nothing can reach its buffer afterwards.
  for (Window& w : windows_) {
    if (w.mw != nullptr) verbs::Library::DeallocMw(w.mw);
    w.mw = nullptr;
  }
}

Engine::~Engine() {
  if (!failed_) Fail(Aborted("engine destroyed"), /*notify=*/false);
  DeallocWindows();
}

void Engine::SetPeer(const PeerLimits& peer) {
  peer_ = peer;
  credits_ = SendCredits(peer.recv_queue_depth);
}

Status Engine::PostInitialReceives() {
  return RepostReceives(config_.recv_queue_depth);
}

Status Engine::RepostReceives(uint32_t count) {
  // The `count` oldest consumed slots get a buffer (a fresh one where the old one was handed to
  // the application) and go back to the NIC in one ibv_post_recv.
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t seq = receives_posted_ + i;
    uint32_t slot = uint32_t(seq % config_.recv_queue_depth);
    Buffer& buf = receive_buffers_[slot];
    if (!buf) {
      auto fresh = Buffer::Allocate(config_.eager_limit);
      if (!fresh.ok()) return fresh.status().WithContext("reposting receives");
      buf = std::move(fresh).value();
    }
    ibv_sge& sge = receive_sges_[i];
    sge.addr = reinterpret_cast<uint64_t>(buf.data());
    sge.length = uint32_t(buf.capacity());
    sge.lkey = buf.lkey();
    ibv_recv_wr& wr = receive_wrs_[i];
    wr = {};
    wr.wr_id = kReceiveTag | seq;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.next = i + 1 < count ? &receive_wrs_[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  if (int rc = verbs::Library::PostRecv(qp_, receive_wrs_.data(), &bad); rc != 0)
    return Status::FromErrno(rc, "ibv_post_recv on QP " + std::to_string(qp_->qp_num));
  receives_posted_ += count;
  ++counters_.receive_batches_posted;
  return Status::Ok();
}

Engine::Channel* Engine::Find(ChannelId channel) {
  auto it = channels_.find(channel);
  return it == channels_.end() ? nullptr : &it->second;
}

bool Engine::ChannelOpen(ChannelId channel) const {
  auto it = channels_.find(channel);
  return it != channels_.end() && !it->second.closing;
}

Status Engine::OpenChannel(ChannelId channel) {
  if (failed_) return failure_;
  if (channel >= kMaxChannels) return InvalidArgument("channel id out of range");
  if (!channels_.try_emplace(channel).second)
    return FailedPrecondition("channel " + std::to_string(channel) + " is still in use on QP " +
                              std::to_string(qp_->qp_num));
  ++counters_.channels_opened;
  control_.push_back({Kind::kChannelOpen, channel, {}, -1, 0, nullptr});
  dirty = true;
  return Status::Ok();
}

void Engine::AcceptChannel(ChannelId channel) {
  if (ChannelOpen(channel)) {
    control_.push_back({Kind::kChannelAccept, channel, {}, -1, 0, nullptr});
    dirty = true;
  }
}

void Engine::QueueClose(ChannelId id, Channel& channel) {
  if (channel.close_queued) return;
  channel.close_queued = true;
  control_.push_back({Kind::kChannelClose, id, {}, -1, 0, nullptr});
  dirty = true;
}

void Engine::CloseChannel(ChannelId id, const Status& why) {
  Channel* channel = Find(id);
  if (channel == nullptr || channel->closing) return;
  channel->closing = true;
  channel->FailQueued(why);
  // A message not started yet is dropped. One under way is abandoned: its sender hears now,
  // but the engine keeps the buffer until the NIC is done with it, and ends the exchange with
  // the peer (which may hold a destination buffer for it) once the reply is in.
  if (Outgoing* current = channel->current.get()) {
    auto done = std::move(current->message.done);
    const bool nothing_posted = current->state == Outgoing::State::kQueued ||
                                (current->known_target && current->offset == 0);
    if (nothing_posted) {
      channel->current.reset();
    } else {
      current->abandoned = true;
    }
    if (done) done(why);
  }
  if (!channel->current) {
    scheduler_.Remove(id);
    QueueClose(id, *channel);
  }
}

void Engine::MaybeRelease(ChannelId id) {
  Channel* channel = Find(id);
  if (channel == nullptr || !channel->close_sent || !channel->peer_closed || channel->current)
    return;
  scheduler_.Remove(id);
  channels_.erase(id);
  if (callbacks_.on_channel_released) callbacks_.on_channel_released(id);
}

void Engine::Enqueue(ChannelId channel, OutgoingMessage message) {
  if (failed_) {
    if (message.done) message.done(failure_);
    return;
  }
  if (!ChannelOpen(channel)) {
    if (message.done)
      message.done(FailedPrecondition("channel " + std::to_string(channel) + " is closed"));
    return;
  }
  if (message.data.size() > peer_.max_message_bytes) {
    if (message.done)
      message.done(InvalidArgument("message of " + std::to_string(message.data.size()) +
                                   " bytes exceeds the peer's limit of " +
                                   std::to_string(peer_.max_message_bytes)));
    return;
  }
  auto out = std::make_unique<Outgoing>();
  out->message = std::move(message);
  Push(channel, std::move(out));
}

void Engine::EnqueueWrite(ChannelId channel, OutgoingMessage message, RemoteBuffer target,
                          uint16_t tag) {
  if (failed_ || !ChannelOpen(channel)) {
    if (message.done)
      message.done(failed_
                       ? failure_
                       : FailedPrecondition("channel " + std::to_string(channel) + " is closed"));
    return;
  }
  auto out = std::make_unique<Outgoing>();
  out->message = std::move(message);
  out->state = Outgoing::State::kWriting;
  out->known_target = true;
  out->id = tag;
  out->remote_addr = target.addr;
  out->rkey = target.rkey;
  ++counters_.remote_writes;
  Push(channel, std::move(out));
}

void Engine::Push(ChannelId channel, std::unique_ptr<Outgoing> out) {
  channels_.at(channel).Append(std::move(out));
  scheduler_.Activate(channel);
  dirty = true;
}

// Control payloads go inline: the NIC copies them at post time, so no buffer has to be kept.
void Engine::SetInlineBytes(WorkRequestChain::Slot& slot, const void* payload, uint32_t size) {
  std::memcpy(slot.inline_payload, payload, size);
  slot.wr.send_flags = IBV_SEND_INLINE;
  slot.sge = {reinterpret_cast<uint64_t>(slot.inline_payload), size, 0};
  slot.wr.num_sge = 1;
}

void Engine::PrepareImm(WorkRequestChain::Slot& slot, Kind kind, uint16_t id) {
  uint16_t credits = uint16_t(returner_.Take(kMaxCreditsPerImm));
  slot.wr.imm_data = htonl(EncodeImm(Imm{kind, credits, id}));
  credits_.Spend();
}

void Engine::Start() {
  started_ = true;
  dirty = true;
}

void Engine::EmitControl() {
  Control control = control_.front();
  control_.pop_front();
  if (control.window >= 0) {
    // The bind goes first on the same send queue: the rkey is valid before the SEND carrying it
    // can reach the peer (type 2 binds execute in send-queue order).
    auto& bind = chain_.Prepare();
    bind.wr.opcode = IBV_WR_BIND_MW;
    bind.wr.num_sge = 0;
    bind.wr.bind_mw.mw = windows_[uint32_t(control.window)].mw;
    bind.wr.bind_mw.rkey = control.reply.rkey;
    bind.wr.bind_mw.bind_info.mr = control.mr;
    bind.wr.bind_mw.bind_info.addr = control.reply.addr;
    bind.wr.bind_mw.bind_info.length = control.length;
    bind.wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    ++counters_.windows_bound;
  }
  auto& slot = chain_.Prepare();
  slot.wr.opcode = IBV_WR_SEND_WITH_IMM;
  if (control.kind == Kind::kRendezvousReply) {
    SetInline(slot, control.reply);
    if (callbacks_.on_granted)
      callbacks_.on_granted(control.id, RemoteBuffer{control.reply.addr, control.reply.rkey},
                            control.length);
  }
  PrepareImm(slot, control.kind, control.id);
  if (control.kind == Kind::kChannelClose) {
    if (Channel* channel = Find(control.id)) channel->close_sent = true;
    MaybeRelease(control.id);
  }
}

void Engine::Pump() {
  dirty = false;
  if (failed_ || !started_) return;
  // Invalidates first, in a batch of their own: a received message waits on them, and as the
  // last request of its batch an invalidate is signalled, so its completion does not wait for
  // data posted after it.
  if (!invalidations_.empty()) {
    EmitInvalidations();
    if (failed_) return;
  }
  while (chain_.free_slots() > 0) {
    // Control first: a peer's transfer waits on our rendezvous replies.
    if (!control_.empty()) {
      if (!credits_.CanSendData()) {
        ++counters_.credit_stalls;
        break;
      }
      // A reply with a window takes two slots (bind, then SEND), no credit for the bind.
      if (control_.front().window >= 0 && chain_.free_slots() < 2) break;
      EmitControl();
      continue;
    }
    if (scheduler_.empty()) break;
    if (PumpChannel(scheduler_.Current()) == Step::kBlocked) break;
  }
  // Credits owed and nothing going out to carry them: a credit message of its own.
  if (returner_.NeedsCreditMessage() && chain_.free_slots() > 0 && credits_.CanSendCreditUpdate()) {
    auto& slot = chain_.Prepare();
    slot.wr.opcode = IBV_WR_SEND_WITH_IMM;
    slot.wr.num_sge = 0;
    PrepareImm(slot, Kind::kCredit, 0);
    ++counters_.credit_updates_sent;
  }
  if (int rc = chain_.PostPending(qp_, &verbs::Library::PostSend); rc != 0)
    Fail(Status::FromErrno(rc, "ibv_post_send on QP " + std::to_string(qp_->qp_num)));
}

// LOCAL_INV of each window whose transfer has ended: no bytes, no credit (it reaches nobody).
void Engine::EmitInvalidations() {
  while (!invalidations_.empty() && chain_.free_slots() > 0) {
    uint32_t w = invalidations_.front();
    invalidations_.pop_front();
    auto& slot = chain_.Prepare();
    slot.wr.opcode = IBV_WR_LOCAL_INV;
    slot.wr.num_sge = 0;
    slot.wr.invalidate_rkey = windows_[w].rkey;
    slot.window = w + 1;
  }
  if (int rc = chain_.PostPending(qp_, &verbs::Library::PostSend); rc != 0)
    Fail(Status::FromErrno(rc, "ibv_post_send on QP " + std::to_string(qp_->qp_num)));
}

// The window's invalidate completed: the peer can no longer reach its buffer, which may now go
// to the application (or be freed, after an abort); the window goes back to the pool.
void Engine::OnInvalidated(uint32_t w) {
  ++counters_.windows_invalidated;
  Window& window = windows_[w];
  Buffer aborted = std::move(window.buffer);
  const bool releases = std::exchange(window.releases, false);
  const ChannelId channel = window.channel;
  free_windows_.push_back(w);
  aborted.Reset();
  if (!releases) return;
  auto it = held_.find(channel);
  if (it == held_.end()) return;
  for (Held& held : it->second) {
    if (held.window == int32_t(w)) held.window = -1;
  }
  FlushHeld(channel);
}

// May a request of `bytes` (taking `slots` chain slots) go now? kBlocked stops the whole pump
// (no credit, no room in the chain or the window: no other channel could go either); kNext
// means this channel's quantum is spent and the scheduler moves on.
Engine::Step Engine::Admit(uint32_t bytes, bool spends_credit, uint32_t slots) {
  if (spends_credit && !credits_.CanSendData()) {
    ++counters_.credit_stalls;
    return Step::kBlocked;
  }
  if (chain_.free_slots() < slots) return Step::kBlocked;
  if (!window_.CanPost(bytes)) {
    if (!window_blocked_) window_.NoteStall();
    window_blocked_ = true;
    return Step::kBlocked;
  }
  if (!scheduler_.Spend(bytes)) {
    scheduler_.EndVisit();
    return Step::kNext;
  }
  window_blocked_ = false;
  return Step::kGo;
}

// The last request of the channel's current message is prepared: the slot owns the message now.
void Engine::FinishMessage(ChannelId id, Channel& channel, WorkRequestChain::Slot& last) {
  last.cookie = channel.current.release();
  if (channel.closing) QueueClose(id, channel);
  if (!channel.head) scheduler_.Deactivate();
}

// Prepares the next request(s) of channel `id`: one eager message, one rendezvous request or
// one fragment.
Engine::Step Engine::PumpChannel(ChannelId id) {
  Channel* channel = Find(id);
  if (channel == nullptr || !channel->has_work()) {
    scheduler_.Deactivate();
    return Step::kNext;
  }
  if (!channel->current) channel->current = channel->PopFront();
  Outgoing& out = *channel->current;
  if (out.state == Outgoing::State::kAwaitingReply) {
    scheduler_.Deactivate();  // back when the reply arrives
    return Step::kNext;
  }
  if (out.state == Outgoing::State::kQueued) {
    const bool eager = out.size() <= peer_.eager_limit;
    uint32_t bytes = eager ? uint32_t(out.size()) : uint32_t(sizeof(RendezvousRequest));
    if (Step step = Admit(bytes, true, 1); step != Step::kGo) return step;
    auto& slot = chain_.Prepare();
    slot.wr.opcode = IBV_WR_SEND_WITH_IMM;
    slot.bytes = bytes;
    window_.OnPosted(bytes);
    if (eager) {
      // Zero-copy: the NIC reads the application's registered buffer.
      if (out.size() > 0) {
        slot.sge = {reinterpret_cast<uint64_t>(out.message.data.data()), uint32_t(out.size()),
                    out.message.data.lkey()};
        slot.wr.num_sge = 1;
      }
      PrepareImm(slot, Kind::kEager, id);
      ++counters_.eager_sent;
      if (callbacks_.on_prepared) callbacks_.on_prepared(id, bytes, true);
      FinishMessage(id, *channel, slot);  // completes when this request retires
      return Step::kNext;
    }
    out.id = AllocateRendezvousId();
    rendezvous_[out.id] = id;
    RendezvousRequest request{out.size(), id, {}};
    SetInline(slot, request);
    PrepareImm(slot, Kind::kRendezvousRequest, out.id);
    out.state = Outgoing::State::kAwaitingReply;
    ++counters_.rendezvous_sent;
    scheduler_.Deactivate();
    return Step::kNext;
  }
  if (out.abandoned && !out.known_target) {
    if (Step step = Admit(0, true, 1); step != Step::kGo) return step;
    auto& slot = chain_.Prepare();
    slot.wr.opcode = IBV_WR_SEND_WITH_IMM;
    PrepareImm(slot, Kind::kRendezvousAbort, out.id);
    rendezvous_.erase(out.id);
    FinishMessage(id, *channel, slot);  // the buffer lives until this SEND (after every fragment)
    return Step::kNext;
  }
  // Writing fragments to p, p+S, ...; one per visit, so other channels interleave.
  // A fragment never exceeds the window: otherwise a window smaller than S would let S-sized
  // requests through one at a time and bound nothing (the fabric simulator showed this).
  uint64_t fragment = config_.fragment_bytes;
  if (window_.enabled()) fragment = std::min(fragment, window_.limit());
  uint32_t length = uint32_t(std::min<uint64_t>(fragment, out.size() - out.offset));
  const bool last = out.offset + length == out.size();
  // A known-target write ends with a SEND carrying the tag: two requests.
  const uint32_t slots = last && out.known_target ? 2 : 1;
  if (Step step = Admit(length, last, slots); step != Step::kGo) return step;
  auto& slot = chain_.Prepare();
  slot.sge = {reinterpret_cast<uint64_t>(out.message.data.data()) + out.offset, length,
              out.message.data.lkey()};
  slot.wr.num_sge = 1;
  slot.wr.wr.rdma.remote_addr = out.remote_addr + out.offset;
  slot.wr.wr.rdma.rkey = out.rkey;
  slot.wr.opcode = IBV_WR_RDMA_WRITE;
  slot.bytes = length;
  window_.OnPosted(length);
  out.offset += length;
  ++counters_.fragments;
  if (callbacks_.on_prepared) callbacks_.on_prepared(id, length, last);
  if (!last) {
    scheduler_.EndVisit();
    return Step::kNext;
  }
  if (out.known_target) {
    auto& notify = chain_.Prepare();
    notify.wr.opcode = IBV_WR_SEND_WITH_IMM;
    RemoteWriteDone done{id, out.id, 0};
    SetInline(notify, done);
    PrepareImm(notify, Kind::kRemoteWriteDone, 0);
    FinishMessage(id, *channel, notify);
  } else {
    slot.wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    PrepareImm(slot, Kind::kRendezvousDone, out.id);
    rendezvous_.erase(out.id);
    FinishMessage(id, *channel, slot);
  }
  // One fragment per visit; FinishMessage has already let an idle channel go.
  if (scheduler_.active(id)) scheduler_.EndVisit();
  return Step::kNext;
}

uint16_t Engine::AllocateRendezvousId() {
  // At most one rendezvous per channel is under way and there are fewer channels than ids, so
  // this always finds one.
  while (next_rendezvous_id_ == 0 || rendezvous_.count(next_rendezvous_id_)) ++next_rendezvous_id_;
  return next_rendezvous_id_++;
}

void Engine::OnCompletion(const ibv_wc& wc) {
  if (failed_) return;
  if (wc.status != IBV_WC_SUCCESS) {
    // With rnr_retry = 0 a receiver-not-ready surfaces as this status: count it, then fail.
    if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR) ++counters_.rnr_events;
    const bool receive = (wc.wr_id & kReceiveTag) != 0;
    Fail(Aborted(std::string(receive ? "receive" : "send") + " completion on QP " +
                 std::to_string(qp_->qp_num) + ": " + lib_.wc_status_str(wc.status)));
    return;
  }
  if (wc.wr_id & kReceiveTag) {
    OnReceive(wc);
  } else {
    OnSendCompletion(wc);
  }
}

void Engine::OnSendCompletion(const ibv_wc& wc) {
  ++counters_.signalled_completions;
  chain_.RetireThrough(wc.wr_id, [this](WorkRequestChain::Slot& slot) { Retire(slot, Status()); });
  for (size_t i = 0; i < invalidated_.size() && !failed_; ++i) OnInvalidated(invalidated_[i]);
  invalidated_.clear();
  dirty = true;
}

void Engine::Retire(WorkRequestChain::Slot& slot, const Status& status) {
  window_.OnCompleted(slot.bytes);
  if (slot.window != 0) {
    uint32_t w = slot.window - 1;
    slot.window = 0;
    // Handled after the retiring pass (it may run application callbacks); after a failure the
    // windows are gone and held buffers are freed with the rest of the engine's state.
    if (status.ok() && !failed_) invalidated_.push_back(w);
    return;
  }
  if (slot.cookie == nullptr) return;
  std::unique_ptr<Outgoing> out(static_cast<Outgoing*>(slot.cookie));
  slot.cookie = nullptr;
  if (status.ok() && !out->abandoned) {
    ++counters_.messages_sent;
    counters_.bytes_sent += out->size();
  }
  // Release the buffer before telling the application it may reuse its memory; after a failure
  // the NIC may still read it (Fail).
  auto done = std::move(out->message.done);
  if (failed_) nic_may_touch_.push_back(std::move(out->message.data));
  out.reset();
  if (done) done(status);
}

void Engine::Deliver(ChannelId id, Buffer message) {
  Channel* channel = Find(id);
  if (channel == nullptr) {
    Fail(DataLoss("message for channel " + std::to_string(id) + ", which is not open, on QP " +
                  std::to_string(qp_->qp_num)));
    return;
  }
  if (channel->closing || channel->peer_closed) {
    ++counters_.messages_dropped;
    return;  // the buffer is freed here
  }
  ++counters_.messages_received;
  counters_.bytes_received += message.size();
  callbacks_.on_message(id, std::move(message));
}

void Engine::OnRemoteWrite(ChannelId id, uint16_t tag) {
  Channel* channel = Find(id);
  if (channel == nullptr) {
    Fail(DataLoss("remote write for a channel that is not open"));
    return;
  }
  if (channel->closing) {
    ++counters_.messages_dropped;
  } else {
    ++counters_.messages_received;
    if (callbacks_.on_remote_write) callbacks_.on_remote_write(id, tag);
  }
}

void Engine::Emit(ChannelId channel, Held event) {
  auto it = held_.find(channel);
  if (it != held_.end()) {
    it->second.push_back(std::move(event));
    return;
  }
  Process(channel, event);
}

void Engine::Process(ChannelId channel, Held& event) {
  switch (event.what) {
    case Held::What::kMessage:
      Deliver(channel, std::move(event.buffer));
      return;
    case Held::What::kRemoteWrite:
      OnRemoteWrite(channel, event.tag);
      return;
    case Held::What::kPeerClose:
      OnPeerClosed(channel);
      return;
  }
}

// Hands over the channel's held events up to the first one still waiting for an invalidate.
void Engine::FlushHeld(ChannelId channel) {
  while (!failed_) {
    auto it = held_.find(channel);  // again each time: a callback may have changed the map
    if (it == held_.end()) return;
    if (it->second.empty()) {
      held_.erase(it);
      return;
    }
    if (it->second.front().window >= 0) return;
    Held event = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) held_.erase(it);
    Process(channel, event);
  }
}

void Engine::OnPeerOpened(ChannelId id) {
  if (id >= kMaxChannels || !channels_.try_emplace(id).second) {
    Fail(DataLoss("peer opened channel " + std::to_string(id) + ", which is in use"));
    return;
  }
  ++counters_.channels_opened;
  if (callbacks_.on_channel_open) callbacks_.on_channel_open(id);
}

void Engine::OnPeerClosed(ChannelId id) {
  Channel* channel = Find(id);
  if (channel == nullptr || channel->peer_closed) {
    Fail(DataLoss("peer closed channel " + std::to_string(id) + " twice or before opening it"));
    return;
  }
  channel->peer_closed = true;
  const bool we_closed_first = channel->closing;
  CloseChannel(id, Aborted("the peer closed the socket"));
  if (!we_closed_first && callbacks_.on_channel_closed) callbacks_.on_channel_closed(id);
  MaybeRelease(id);
}

void Engine::OnReceive(const ibv_wc& wc) {
  uint64_t seq = wc.wr_id & ~kReceiveTag;
  uint32_t slot = uint32_t(seq % config_.recv_queue_depth);
  if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
    Fail(DataLoss("message without immediate on QP " + std::to_string(qp_->qp_num)));
    return;
  }
  Imm imm = DecodeImm(ntohl(wc.imm_data));
  if (imm.credits > 0) {
    counters_.credits_received += imm.credits;
    if (credits_.available() + imm.credits > credits_.limit()) {
      Fail(DataLoss("peer returned more credits than it has receives"));
      return;
    }
    credits_.Return(imm.credits);
  }
  if (!Dispatch(imm, slot, wc.byte_len) || failed_) return;
  if (returner_.OnReceiveConsumed()) {
    uint32_t batch = returner_.batch();
    if (Status s = RepostReceives(batch); !s.ok()) {
      Fail(s);
      return;
    }
    returner_.OnReposted(batch);
  }
  dirty = true;
}

bool Engine::Dispatch(const Imm& imm, uint32_t slot, uint32_t byte_len) {
  const Buffer& payload = receive_buffers_[slot];
  auto read = [&](auto& out) {
    if (byte_len != sizeof(out)) return false;
    std::memcpy(&out, payload.data(), sizeof(out));
    return true;
  };
  switch (imm.kind) {
    case Kind::kEager: {
      Buffer message = std::move(receive_buffers_[slot]);
      message.Resize(byte_len);
      Emit(imm.id, Held{Held::What::kMessage, std::move(message), 0, -1});
      return true;
    }
    case Kind::kRendezvousRequest: {
      RendezvousRequest request;
      if (!read(request) || Find(request.channel) == nullptr || incoming_.count(imm.id)) {
        Fail(DataLoss("malformed rendezvous request"));
        return false;
      }
      if (request.size > config_.max_message_bytes) {
        Fail(DataLoss("peer announced a " + std::to_string(request.size) +
                      "-byte message, above the limit of " +
                      std::to_string(config_.max_message_bytes)));
        return false;
      }
      // Allocated and answered even if the channel is closing here: the peer's transfer must
      // complete so that both sides release what it holds.
      auto dest = Buffer::Allocate(request.size);
      if (!dest.ok()) {
        Fail(dest.status().WithContext("rendezvous destination"));
        return false;
      }
      RendezvousReply reply{reinterpret_cast<uint64_t>(dest->data()), dest->rkey(), 0};
      Control control{Kind::kRendezvousReply, imm.id, reply, -1, request.size, nullptr};
      if (scoped_) {
        // The peer gets a window over exactly the `size` bytes asked for; a fresh tag makes
        // every earlier key of the window stale.
        control.window = AcquireWindow();
        if (control.window >= 0) {
          Window& window = windows_[uint32_t(control.window)];
          window.rkey = ibv_inc_rkey(window.rkey);
          control.reply.rkey = window.rkey;
          control.mr = static_cast<ibv_mr*>(bemalloc::GetMR(dest->data())->handle);
        } else {
          ++counters_.unscoped_rendezvous;
        }
      }
      incoming_.emplace(imm.id, Incoming{request.channel, std::move(dest).value(), control.window});
      control_.push_back(control);
      return true;
    }
    case Kind::kRendezvousReply: {
      RendezvousReply reply;
      auto it = rendezvous_.find(imm.id);
      Channel* channel = it == rendezvous_.end() ? nullptr : Find(it->second);
      if (channel == nullptr || !channel->current ||
          channel->current->state != Outgoing::State::kAwaitingReply ||
          channel->current->id != imm.id || !read(reply)) {
        Fail(DataLoss("unexpected rendezvous reply"));
        return false;
      }
      channel->current->remote_addr = reply.addr;
      channel->current->rkey = reply.rkey;
      channel->current->state = Outgoing::State::kWriting;
      scheduler_.Activate(it->second);
      return true;
    }
    case Kind::kRendezvousDone: {
      auto it = incoming_.find(imm.id);
      if (it == incoming_.end()) {
        Fail(DataLoss("rendezvous completion for unknown message " + std::to_string(imm.id)));
        return false;
      }
      // Completion semantics: the WRITE_WITH_IMM completion orders after every earlier write
      // on this QP, so the whole message is in memory now.
      Incoming incoming = std::move(it->second);
      incoming_.erase(it);
      if (incoming.window < 0) {
        Emit(incoming.channel, Held{Held::What::kMessage, std::move(incoming.buffer), 0, -1});
        return true;
      }
      // The message waits (with whatever of its channel follows) until the window is invalid.
      Window& window = windows_[uint32_t(incoming.window)];
      window.releases = true;
      window.channel = incoming.channel;
      held_[incoming.channel].push_back(
          Held{Held::What::kMessage, std::move(incoming.buffer), 0, incoming.window});
      invalidations_.push_back(uint32_t(incoming.window));
      return true;
    }
    case Kind::kRemoteWriteDone: {
      RemoteWriteDone done;
      if (!read(done)) {
        Fail(DataLoss("malformed remote-write notification"));
        return false;
      }
      if (Find(done.channel) == nullptr) {
        Fail(DataLoss("remote write for a channel that is not open"));
        return false;
      }
      Emit(done.channel, Held{Held::What::kRemoteWrite, Buffer(), done.tag, -1});
      return true;
    }
    case Kind::kChannelOpen:
      OnPeerOpened(imm.id);
      return true;
    case Kind::kChannelClose:
      Emit(imm.id, Held{Held::What::kPeerClose, Buffer(), 0, -1});
      return true;
    case Kind::kRendezvousAbort: {
      auto it = incoming_.find(imm.id);
      if (it == incoming_.end()) {
        Fail(DataLoss("abort of unknown rendezvous " + std::to_string(imm.id)));
        return false;
      }
      if (it->second.window >= 0) {
        // Freed only once the peer cannot write into it any more.
        uint32_t w = uint32_t(it->second.window);
        windows_[w].buffer = std::move(it->second.buffer);
        windows_[w].releases = false;
        invalidations_.push_back(w);
      }
      incoming_.erase(it);
      return true;
    }
    case Kind::kChannelAccept:
      if (Find(imm.id) == nullptr) {
        Fail(DataLoss("peer accepted channel " + std::to_string(imm.id) + ", never opened"));
        return false;
      }
      if (callbacks_.on_channel_accepted) callbacks_.on_channel_accepted(imm.id);
      return true;
    case Kind::kCredit:
      return true;
  }
  Fail(DataLoss("unknown message kind " + std::to_string(int(imm.kind))));
  return false;
}

void Engine::Fail(const Status& why, bool notify) {
  if (failed_) return;
  failed_ = true;
  failure_ = why;
  // Stop the QP. Moving it to ERR does not stop the NIC at once: a work request it has started
  // may still read a send buffer or write a receive until its flush completion. So every buffer
  // a posted request names is kept (nic_may_touch_, the receive ring) until the engine is
  // destroyed, which its owner does after destroying the QP.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  if (int rc = lib_.modify_qp(qp_, &attr, IBV_QP_STATE); rc != 0) {
    // It may still be running: the buffers are kept all the same, and the owner destroys it.
    Log(LogLevel::kWarning, "bexpress: QP " + std::to_string(qp_->qp_num) +
                                " did not move to the error state: " + std::strerror(rc));
  }
  // Windows go before the buffers they cover: no bound window outlives its memory.
  DeallocWindows();
  windows_.clear();
  free_windows_.clear();
  invalidations_.clear();
  chain_.DropAll([&](WorkRequestChain::Slot& slot) { Retire(slot, why); });
  for (auto& [id, channel] : channels_) {
    if (channel.current) {
      // Some of its fragments may be posted.
      auto done = std::move(channel.current->message.done);
      nic_may_touch_.push_back(std::move(channel.current->message.data));
      channel.current.reset();
      if (done) done(why);
    }
    channel.FailQueued(why);  // never posted
  }
  channels_.clear();
  held_.clear();
  // Rendezvous destinations: the peer's writes into them may be under way.
  for (auto& [id, incoming] : incoming_) nic_may_touch_.push_back(std::move(incoming.buffer));
  incoming_.clear();
  control_.clear();
  rendezvous_.clear();
  if (notify && callbacks_.on_failure) callbacks_.on_failure(why);
}

EngineCounters Engine::counters() const {
  EngineCounters c = counters_;
  c.batches = chain_.batches();
  c.requests_posted = chain_.requests_posted();
  c.channels_open = channels_.size();
  c.window_stalls = window_.stalls();
  c.max_outstanding_bytes = window_.max_outstanding();
  c.window_bytes = window_.limit();
  c.scheduler_rounds = scheduler_.rounds();
  c.windows_allocated = windows_.size();
  return c;
}

}  // namespace bx::engine
