// The receive path: posted receives, dispatch of every received message by the kind in its
// immediate, and handing each channel's events (messages, remote writes, the peer's close) up to
// the application in order, some of them behind a memory window's invalidate.
#include <arpa/inet.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "engine/engine.h"
#include "engine/engine_internal.h"

namespace bx::engine {
namespace {

// Copies a received control payload into `out`; false if its length is not the struct's.
template <typename WireStruct>
bool ReadPayload(const Buffer& payload, uint32_t byte_len, WireStruct& out) {
  static_assert(std::is_trivially_copyable_v<WireStruct>);
  if (byte_len != sizeof(out)) return false;
  std::memcpy(&out, payload.data(), sizeof(out));
  return true;
}

}  // namespace

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
  dirty_ = true;
}

bool Engine::Dispatch(const Imm& imm, uint32_t slot, uint32_t byte_len) {
  const Buffer& payload = receive_buffers_[slot];
  switch (imm.kind) {
    case Kind::kEager: {
      // The receive buffer itself goes up (no copy); the slot gets a fresh one at the repost.
      Buffer message = std::move(receive_buffers_[slot]);
      message.Resize(byte_len);
      HandUp(imm.id, Held{Held::What::kMessage, std::move(message), 0, -1});
      return true;
    }
    case Kind::kRendezvousRequest:
      return OnRendezvousRequest(imm.id, payload, byte_len);
    case Kind::kRendezvousReply:
      return OnRendezvousReply(imm.id, payload, byte_len);
    case Kind::kRendezvousDone:
      return OnRendezvousDone(imm.id);
    case Kind::kRendezvousAbort:
      return OnRendezvousAbort(imm.id);
    case Kind::kRemoteWriteDone:
      return OnRemoteWriteDone(payload, byte_len);
    case Kind::kChannelOpen:
      OnPeerOpened(imm.id);
      return true;
    case Kind::kChannelAccept:
      return OnPeerAccepted(imm.id);
    case Kind::kChannelClose:
      HandUp(imm.id, Held{Held::What::kPeerClose, Buffer(), 0, -1});
      return true;
    case Kind::kCredit:
      return true;
  }
  Fail(DataLoss("unknown message kind " + std::to_string(int(imm.kind))));
  return false;
}

// The peer announces a large message: allocate its destination and queue the reply that tells
// the peer where to write it.
bool Engine::OnRendezvousRequest(uint16_t id, const Buffer& payload, uint32_t byte_len) {
  RendezvousRequest request;
  if (!ReadPayload(payload, byte_len, request) || Find(request.channel) == nullptr ||
      incoming_.count(id)) {
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
  Control control{Kind::kRendezvousReply, id,
                  RendezvousReply{reinterpret_cast<uint64_t>(dest->data()), dest->rkey(), 0},
                  request.size};
  if (windows_.enabled()) {
    // The peer gets a window over exactly the `size` bytes asked for.
    control.grant = windows_.Acquire(*dest);
    if (control.grant.window >= 0) control.reply.rkey = control.grant.rkey;
  }
  incoming_.emplace(id, Incoming{request.channel, std::move(dest).value(), control.grant.window});
  control_.push_back(control);
  return true;
}

// The peer tells us where to write our message `id`: its fragments may go.
bool Engine::OnRendezvousReply(uint16_t id, const Buffer& payload, uint32_t byte_len) {
  RendezvousReply reply;
  auto it = rendezvous_.find(id);
  Channel* channel = it == rendezvous_.end() ? nullptr : Find(it->second);
  // The message under way, or one announced ahead of it.
  auto awaits = [id](const Outgoing* o) {
    return o != nullptr && !o->known_target && o->id == id &&
           o->state == Outgoing::State::kAwaitingReply;
  };
  Outgoing* out = nullptr;
  if (channel != nullptr) {
    if (awaits(channel->current.get())) out = channel->current.get();
    Outgoing* queued = channel->head.get();
    for (uint32_t i = 0; i < channel->ahead && out == nullptr; ++i, queued = queued->next.get()) {
      if (awaits(queued)) out = queued;
    }
  }
  if (out == nullptr || !ReadPayload(payload, byte_len, reply)) {
    Fail(DataLoss("unexpected rendezvous reply"));
    return false;
  }
  out->remote_addr = reply.addr;
  out->rkey = reply.rkey;
  out->state = Outgoing::State::kWriting;
  // One announced ahead waits for its turn, which its channel's current message brings.
  if (out == channel->current.get()) scheduler_.Activate(it->second);
  return true;
}

// The last fragment of the peer's message `id` has landed.
bool Engine::OnRendezvousDone(uint16_t id) {
  auto it = incoming_.find(id);
  if (it == incoming_.end()) {
    Fail(DataLoss("rendezvous completion for unknown message " + std::to_string(id)));
    return false;
  }
  // Completion semantics: the WRITE_WITH_IMM completion orders after every earlier write on this
  // QP, so the whole message is in memory now.
  Incoming incoming = std::move(it->second);
  incoming_.erase(it);
  if (incoming.window < 0) {
    HandUp(incoming.channel, Held{Held::What::kMessage, std::move(incoming.buffer), 0, -1});
    return true;
  }
  // The message waits (with whatever of its channel follows) until the window is invalid.
  windows_.InvalidateForDelivery(uint32_t(incoming.window), incoming.channel);
  held_[incoming.channel].push_back(
      Held{Held::What::kMessage, std::move(incoming.buffer), 0, incoming.window});
  return true;
}

// The peer's socket closed in the middle of its message `id`: drop the destination.
bool Engine::OnRendezvousAbort(uint16_t id) {
  auto it = incoming_.find(id);
  if (it == incoming_.end()) {
    Fail(DataLoss("abort of unknown rendezvous " + std::to_string(id)));
    return false;
  }
  // With a window, freed only once the peer cannot write into it any more.
  if (it->second.window >= 0)
    windows_.InvalidateAndFree(uint32_t(it->second.window), std::move(it->second.buffer));
  incoming_.erase(it);
  return true;
}

bool Engine::OnRemoteWriteDone(const Buffer& payload, uint32_t byte_len) {
  RemoteWriteDone done;
  if (!ReadPayload(payload, byte_len, done)) {
    Fail(DataLoss("malformed remote-write notification"));
    return false;
  }
  if (Find(done.channel) == nullptr) {
    Fail(DataLoss("remote write for a channel that is not open"));
    return false;
  }
  HandUp(done.channel, Held{Held::What::kRemoteWrite, Buffer(), done.tag, -1});
  return true;
}

void Engine::HandUp(ChannelId channel, Held event) {
  auto it = held_.find(channel);
  if (it != held_.end()) {
    it->second.push_back(std::move(event));
    return;
  }
  HandUpNow(channel, event);
}

void Engine::HandUpNow(ChannelId channel, Held& event) {
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

void Engine::HandUpReleased(ChannelId channel) {
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
    HandUpNow(channel, event);
  }
}

// The window's invalidate completed: the peer can no longer reach its buffer, which may now go
// to the application (or was freed, after an abort); the window is back in the pool.
void Engine::OnInvalidated(uint32_t w) {
  std::optional<ChannelId> channel = windows_.OnInvalidated(w);
  if (!channel) return;
  auto it = held_.find(*channel);
  if (it == held_.end()) return;
  for (Held& held : it->second) {
    if (held.window == int32_t(w)) held.window = -1;
  }
  HandUpReleased(*channel);
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

}  // namespace bx::engine
