// The send path: messages queue per channel; the pump moves control messages and then, as the
// fragment scheduler picks channels, eager messages, rendezvous requests and fragments into the
// work-request chain, within credits, chain slots and the send window; completions retire them.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "base/dcheck.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"

namespace bx::engine {

std::unique_ptr<Engine::Outgoing> Engine::NewOutgoing(OutgoingMessage message) {
  auto out = std::make_unique<Outgoing>();
  out->message = std::move(message);
  return out;
}

std::unique_ptr<Engine::Outgoing> Engine::NewWrite(OutgoingMessage message, RemoteBuffer target,
                                                   uint16_t tag) {
  auto out = NewOutgoing(std::move(message));
  out->state = Outgoing::State::kWriting;
  out->known_target = true;
  out->id = tag;
  out->remote_addr = target.addr;
  out->rkey = target.rkey;
  return out;
}

void Engine::Enqueue(ChannelId channel, OutgoingMessage message) {
  Enqueue(channel, NewOutgoing(std::move(message)));
}

void Engine::EnqueueWrite(ChannelId channel, OutgoingMessage message, RemoteBuffer target,
                          uint16_t tag) {
  Enqueue(channel, NewWrite(std::move(message), target, tag));
}

void Engine::Enqueue(ChannelId channel, std::unique_ptr<Outgoing> out) {
  BX_DCHECK(OnHomeThread());
  Status refusal;
  if (failed_) {
    refusal = failure_;
  } else if (!ChannelOpen(channel)) {
    refusal = FailedPrecondition("channel " + std::to_string(channel) + " is closed");
  } else if (!out->known_target && out->size() > peer_.max_message_bytes) {
    refusal = InvalidArgument("message of " + std::to_string(out->size()) +
                              " bytes exceeds the peer's limit of " +
                              std::to_string(peer_.max_message_bytes));
  }
  if (!refusal.ok()) {
    SendCompletion done = std::move(out->message.done);
    out.reset();
    if (done) done(refusal);
    return;
  }
  if (out->known_target) ++counters_.remote_writes;
  Push(channel, std::move(out));
}

void Engine::Push(ChannelId channel, std::unique_ptr<Outgoing> out) {
  channels_.at(channel).Append(std::move(out));
  scheduler_.Activate(channel);
  dirty_ = true;
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

void Engine::PrepareControl() {
  Control control = control_.front();
  control_.pop_front();
  if (control.grant.window >= 0) {
    // The bind goes first on the same send queue: the rkey is valid before the SEND carrying it
    // can reach the peer (type 2 binds execute in send-queue order).
    windows_.PrepareBind(chain_.Prepare(), control.grant, control.reply.addr, control.length);
  }
  auto& slot = chain_.Prepare();
  slot.wr.opcode = IBV_WR_SEND_WITH_IMM;
  if (control.kind == Kind::kRendezvousReply) {
    SetInline(slot, control.reply);
    if (callbacks_.on_granted)
      callbacks_.on_granted(control.id,
                            RemoteBuffer{control.reply.addr, control.reply.rkey, control.length});
  }
  PrepareImm(slot, control.kind, control.id);
  if (control.kind == Kind::kChannelClose) {
    if (Channel* channel = Find(control.id)) channel->close_sent = true;
    MaybeRelease(control.id);
  }
}

void Engine::Pump() {
  BX_DCHECK(OnHomeThread());
  dirty_ = false;
  if (failed_ || !started_) return;
  // Invalidates first, in a batch of their own: a received message waits on them, and as the
  // last request of its batch an invalidate is signalled, so its completion does not wait for
  // data posted after it.
  if (windows_.has_invalidations()) {
    windows_.PrepareInvalidations(chain_);
    PostPending();
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
      if (control_.front().grant.window >= 0 && chain_.free_slots() < 2) break;
      PrepareControl();
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
  PostPending();
}

// Rings the doorbell for what the chain has prepared.
void Engine::PostPending() {
  if (int rc = chain_.PostPending(qp_, &verbs::Library::PostSend); rc != 0)
    Fail(Status::FromErrno(rc, "ibv_post_send on QP " + std::to_string(qp_->qp_num)));
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
  // A closing channel's queue holds only messages announced ahead (abandoned): each ends with
  // its abort before the close goes.
  if (channel.closing && !channel.head) QueueClose(id, channel);
  if (!channel.head) scheduler_.Deactivate();
}

void Engine::StartNext(Channel& channel) {
  channel.current = channel.PopFront();
  if (channel.ahead > 0) {
    --channel.ahead;
    --ahead_messages_;
    ahead_bytes_ -= channel.current->size();
  }
}

void Engine::PrepareRendezvousRequest(ChannelId channel, Outgoing& out) {
  auto& slot = chain_.Prepare();
  slot.wr.opcode = IBV_WR_SEND_WITH_IMM;
  slot.bytes = sizeof(RendezvousRequest);
  window_.OnPosted(slot.bytes);
  out.id = AllocateRendezvousId();
  rendezvous_[out.id] = channel;
  RendezvousRequest request{out.size(), channel, {}};
  SetInline(slot, request);
  PrepareImm(slot, Kind::kRendezvousRequest, out.id);
  out.state = Outgoing::State::kAwaitingReply;
  ++counters_.rendezvous_sent;
}

void Engine::AnnounceAhead(ChannelId id, Channel& channel) {
  // Checked before the walk too: a channel at its bound is visited once per fragment.
  if (channel.closing || channel.ahead >= config_.rendezvous_ahead_messages) return;
  Outgoing* next = channel.head.get();
  for (uint32_t i = 0; i < channel.ahead && next != nullptr; ++i) next = next->next.get();
  // Only the run of rendezvous messages right behind the current one: an eager message or a
  // known-target write in between ends it (they go in order, and need no request).
  while (next != nullptr && next->state == Outgoing::State::kQueued && !next->known_target &&
         next->size() > peer_.eager_limit) {
    if (channel.ahead >= config_.rendezvous_ahead_messages ||
        ahead_bytes_ + next->size() > config_.rendezvous_ahead_bytes)
      return;
    // Every channel may still need one id for its current message (AllocateRendezvousId).
    if (ahead_messages_ + channels_.size() + 1 >= kMaxChannels) return;
    if (!credits_.CanSendData() || chain_.free_slots() == 0 ||
        !window_.CanPost(sizeof(RendezvousRequest)))
      return;
    PrepareRendezvousRequest(id, *next);
    ++channel.ahead;
    ++ahead_messages_;
    ahead_bytes_ += next->size();
    ++counters_.rendezvous_ahead;
    next = next->next.get();
  }
}

// Prepares the next request(s) of channel `id`: one eager message, one rendezvous request or
// one fragment.
Engine::Step Engine::PumpChannel(ChannelId id) {
  Channel* channel = Find(id);
  if (channel == nullptr || !channel->has_work()) {
    scheduler_.Deactivate();
    return Step::kNext;
  }
  if (!channel->current) StartNext(*channel);
  Outgoing& out = *channel->current;
  if (out.state != Outgoing::State::kQueued) AnnounceAhead(id, *channel);
  if (out.state == Outgoing::State::kAwaitingReply) {
    scheduler_.Deactivate();  // back when the reply arrives
    return Step::kNext;
  }
  if (out.state == Outgoing::State::kQueued) {
    const bool eager = out.size() <= peer_.eager_limit;
    uint32_t bytes = eager ? uint32_t(out.size()) : uint32_t(sizeof(RendezvousRequest));
    if (Step step = Admit(bytes, true, 1); step != Step::kGo) return step;
    if (eager) {
      auto& slot = chain_.Prepare();
      slot.wr.opcode = IBV_WR_SEND_WITH_IMM;
      slot.bytes = bytes;
      window_.OnPosted(bytes);
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
    PrepareRendezvousRequest(id, out);
    AnnounceAhead(id, *channel);
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
  // At most one rendezvous per channel is under way besides those announced ahead, and
  // AnnounceAhead keeps their sum below the number of ids, so this always finds one.
  while (next_rendezvous_id_ == 0 || rendezvous_.count(next_rendezvous_id_)) ++next_rendezvous_id_;
  return next_rendezvous_id_++;
}

void Engine::OnSendCompletion(const ibv_wc& wc) {
  ++counters_.signalled_completions;
  chain_.RetireThrough(wc.wr_id, [this](WorkRequestChain::Slot& slot) { Retire(slot, Status()); });
  for (size_t i = 0; i < invalidated_.size() && !failed_; ++i) OnInvalidated(invalidated_[i]);
  invalidated_.clear();
  dirty_ = true;
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

}  // namespace bx::engine
