#include "engine/engine.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace bx::engine {
namespace {

// Receive work requests carry this bit in wr_id: error completions have no reliable opcode, so
// the wr_id is what tells a failed receive from a failed send.
constexpr uint64_t kReceiveTag = uint64_t{1} << 63;

}  // namespace

struct Engine::Outgoing {
  OutgoingMessage message;
  enum class State { kQueued, kAwaitingReply, kWriting } state = State::kQueued;
  uint16_t id = 0;
  uint64_t offset = 0;       // next byte to write (rendezvous)
  uint64_t remote_addr = 0;  // from the reply, or known in advance
  uint32_t rkey = 0;
  bool known_target = false;  // EnqueueWrite: no rendezvous, completion kind kRemoteWriteDone
  uint64_t size() const { return message.data.size(); }
};

std::map<std::string, uint64_t> EngineCounters::ToMap() const {
  return {{"messages_sent", messages_sent},
          {"bytes_sent", bytes_sent},
          {"messages_received", messages_received},
          {"bytes_received", bytes_received},
          {"eager_sent", eager_sent},
          {"rendezvous_exchanges", rendezvous_sent},
          {"remote_writes", remote_writes},
          {"fragments", fragments},
          {"credit_stalls", credit_stalls},
          {"credit_updates_sent", credit_updates_sent},
          {"credits_received", credits_received},
          {"signalled_completions", signalled_completions},
          {"receive_batches_posted", receive_batches_posted},
          {"batches_posted", batches},
          {"requests_posted", requests_posted},
          {"rnr_events", rnr_events}};
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
      receive_sges_(config.recv_queue_depth) {}

Engine::~Engine() {
  if (!failed_) Fail(Aborted("engine destroyed"), /*notify=*/false);
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

void Engine::Enqueue(OutgoingMessage message) {
  if (failed_) {
    if (message.done) message.done(failure_);
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
  Push(std::move(out));
}

void Engine::Push(std::unique_ptr<Outgoing> out) {
  queue_.push_back(std::move(out));
  dirty = true;
}

void Engine::EnqueueWrite(OutgoingMessage message, RemoteBuffer target, uint16_t tag) {
  if (failed_) {
    if (message.done) message.done(failure_);
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
  Push(std::move(out));
}

// Control payloads go inline: the NIC copies them at post time, so no buffer has to be kept.
void Engine::SetInline(WorkRequestChain::Slot& slot, const void* payload, uint32_t size) {
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

void Engine::Pump() {
  dirty = false;
  if (failed_ || !started_) return;
  while (chain_.free_slots() > 0) {
    // Rendezvous replies first: the peer's transfer waits on them.
    if (!replies_.empty()) {
      if (!credits_.CanSendData()) {
        ++counters_.credit_stalls;
        break;
      }
      auto [id, reply] = replies_.front();
      replies_.pop_front();
      auto& slot = chain_.Prepare();
      slot.wr.opcode = IBV_WR_SEND_WITH_IMM;
      SetInline(slot, &reply, sizeof(reply));
      PrepareImm(slot, Kind::kRendezvousReply, id);
      continue;
    }
    if (!PumpCurrent()) break;
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

// Prepares the next request of the message at the head of the queue. False when nothing more
// can be prepared now (no message, no credit, or waiting for a rendezvous reply).
bool Engine::PumpCurrent() {
  if (!current_) {
    if (queue_.empty()) return false;
    current_ = std::move(queue_.front());
    queue_.pop_front();
  }
  Outgoing& out = *current_;
  const bool eager = out.size() <= peer_.eager_limit;
  if (out.state == Outgoing::State::kAwaitingReply) return false;
  if (out.state == Outgoing::State::kQueued) {
    if (!credits_.CanSendData()) {
      ++counters_.credit_stalls;
      return false;
    }
    auto& slot = chain_.Prepare();
    slot.wr.opcode = IBV_WR_SEND_WITH_IMM;
    if (eager) {
      // Zero-copy: the NIC reads the application's registered buffer.
      if (out.size() > 0) {
        slot.sge = {reinterpret_cast<uint64_t>(out.message.data.data()), uint32_t(out.size()),
                    out.message.data.lkey()};
        slot.wr.num_sge = 1;
      }
      slot.bytes = uint32_t(out.size());
      PrepareImm(slot, Kind::kEager, 0);
      ++counters_.eager_sent;
      slot.cookie = current_.release();  // completes when this request retires
      return true;
    }
    out.id = next_rendezvous_id_++;
    if (next_rendezvous_id_ == 0) next_rendezvous_id_ = 1;
    RendezvousRequest request{out.size()};
    SetInline(slot, &request, sizeof(request));
    PrepareImm(slot, Kind::kRendezvousRequest, out.id);
    out.state = Outgoing::State::kAwaitingReply;
    ++counters_.rendezvous_sent;
    return true;
  }
  // Writing fragments to p, p+S, ...; the last one is WRITE_WITH_IMM.
  uint64_t length = std::min<uint64_t>(config_.fragment_bytes, out.size() - out.offset);
  bool last = out.offset + length == out.size();
  if (last && !credits_.CanSendData()) {
    ++counters_.credit_stalls;
    return false;
  }
  auto& slot = chain_.Prepare();
  slot.sge = {reinterpret_cast<uint64_t>(out.message.data.data()) + out.offset, uint32_t(length),
              out.message.data.lkey()};
  slot.wr.num_sge = 1;
  slot.wr.wr.rdma.remote_addr = out.remote_addr + out.offset;
  slot.wr.wr.rdma.rkey = out.rkey;
  slot.bytes = uint32_t(length);
  out.offset += length;
  ++counters_.fragments;
  if (!last) {
    slot.wr.opcode = IBV_WR_RDMA_WRITE;
    return true;
  }
  slot.wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  PrepareImm(slot, out.known_target ? Kind::kRemoteWriteDone : Kind::kRendezvousDone, out.id);
  slot.cookie = current_.release();
  return true;
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
  dirty = true;
}

void Engine::Retire(WorkRequestChain::Slot& slot, const Status& status) {
  if (slot.cookie == nullptr) return;
  std::unique_ptr<Outgoing> out(static_cast<Outgoing*>(slot.cookie));
  slot.cookie = nullptr;
  if (status.ok()) {
    ++counters_.messages_sent;
    counters_.bytes_sent += out->size();
  }
  // Release the buffer before telling the application it may reuse its memory.
  auto done = std::move(out->message.done);
  out.reset();
  if (done) done(status);
}

void Engine::OnReceive(const ibv_wc& wc) {
  uint64_t seq = wc.wr_id & ~kReceiveTag;
  uint32_t slot = uint32_t(seq % config_.recv_queue_depth);
  ++receives_completed_;
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
  switch (imm.kind) {
    case Kind::kEager: {
      Buffer message = std::move(receive_buffers_[slot]);
      message.Resize(wc.byte_len);
      ++counters_.messages_received;
      counters_.bytes_received += wc.byte_len;
      callbacks_.on_message(std::move(message));
      break;
    }
    case Kind::kRendezvousRequest: {
      RendezvousRequest request;
      if (wc.byte_len != sizeof(request)) {
        Fail(DataLoss("malformed rendezvous request"));
        return;
      }
      std::memcpy(&request, receive_buffers_[slot].data(), sizeof(request));
      if (request.size > config_.max_message_bytes) {
        Fail(DataLoss("peer announced a " + std::to_string(request.size) +
                      "-byte message, above the limit of " +
                      std::to_string(config_.max_message_bytes)));
        return;
      }
      auto dest = Buffer::Allocate(request.size);
      if (!dest.ok()) {
        Fail(dest.status().WithContext("rendezvous destination"));
        return;
      }
      RendezvousReply reply{reinterpret_cast<uint64_t>(dest->data()), dest->rkey(), 0};
      incoming_[imm.id] = std::move(dest).value();
      replies_.emplace_back(imm.id, reply);
      break;
    }
    case Kind::kRendezvousReply: {
      RendezvousReply reply;
      if (!current_ || current_->state != Outgoing::State::kAwaitingReply ||
          current_->id != imm.id || wc.byte_len != sizeof(reply)) {
        Fail(DataLoss("unexpected rendezvous reply"));
        return;
      }
      std::memcpy(&reply, receive_buffers_[slot].data(), sizeof(reply));
      current_->remote_addr = reply.addr;
      current_->rkey = reply.rkey;
      current_->state = Outgoing::State::kWriting;
      break;
    }
    case Kind::kRendezvousDone: {
      auto it = incoming_.find(imm.id);
      if (it == incoming_.end()) {
        Fail(DataLoss("rendezvous completion for unknown message " + std::to_string(imm.id)));
        return;
      }
      // Completion semantics: the WRITE_WITH_IMM completion orders after every earlier write
      // on this QP, so the whole message is in memory now.
      Buffer message = std::move(it->second);
      incoming_.erase(it);
      ++counters_.messages_received;
      counters_.bytes_received += message.size();
      callbacks_.on_message(std::move(message));
      break;
    }
    case Kind::kRemoteWriteDone:
      ++counters_.messages_received;
      if (callbacks_.on_remote_write) callbacks_.on_remote_write(imm.id);
      break;
    case Kind::kCredit:
      break;
    default:
      Fail(DataLoss("unknown message kind " + std::to_string(int(imm.kind))));
      return;
  }
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

void Engine::Fail(const Status& why, bool notify) {
  if (failed_) return;
  failed_ = true;
  failure_ = why;
  // Stop the QP before any buffer is released: the NIC may still be reading a send buffer or
  // writing into a posted receive, and freed memory must not be DMA'd into.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  lib_.modify_qp(qp_, &attr, IBV_QP_STATE);
  chain_.DropAll([&](WorkRequestChain::Slot& slot) { Retire(slot, why); });
  if (current_) {
    auto done = std::move(current_->message.done);
    current_.reset();
    if (done) done(why);
  }
  while (!queue_.empty()) {
    auto done = std::move(queue_.front()->message.done);
    queue_.pop_front();
    if (done) done(why);
  }
  incoming_.clear();
  replies_.clear();
  if (notify && callbacks_.on_failure) callbacks_.on_failure(why);
}

EngineCounters Engine::counters() const {
  EngineCounters c = counters_;
  c.batches = chain_.batches();
  c.requests_posted = chain_.requests_posted();
  return c;
}

}  // namespace bx::engine
