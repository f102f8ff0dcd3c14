// Channel control: the sockets multiplexed over one engine are opened by the connecting side,
// accepted (or refused) by the other, closed by either, and released once both sides have sent
// and received the close (wire.h).
#include <string>

#include "base/dcheck.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"

namespace bx::engine {

Engine::Channel* Engine::Find(ChannelId channel) {
  auto it = channels_.find(channel);
  return it == channels_.end() ? nullptr : &it->second;
}

bool Engine::ChannelOpen(ChannelId channel) const {
  auto it = channels_.find(channel);
  return it != channels_.end() && !it->second.closing;
}

Status Engine::OpenChannel(ChannelId channel) {
  BX_DCHECK(OnHomeThread());
  if (failed_) return failure_;
  if (channel >= kMaxChannels) return InvalidArgument("channel id out of range");
  if (!channels_.try_emplace(channel).second)
    return FailedPrecondition("channel " + std::to_string(channel) + " is still in use on QP " +
                              std::to_string(qp_->qp_num));
  ++counters_.channels_opened;
  control_.push_back({Kind::kChannelOpen, channel, {}});
  dirty_ = true;
  return Status::Ok();
}

void Engine::AcceptChannel(ChannelId channel) {
  BX_DCHECK(OnHomeThread());
  if (ChannelOpen(channel)) {
    control_.push_back({Kind::kChannelAccept, channel, {}});
    dirty_ = true;
  }
}

void Engine::QueueClose(ChannelId id, Channel& channel) {
  if (channel.close_queued) return;
  channel.close_queued = true;
  control_.push_back({Kind::kChannelClose, id, {}});
  dirty_ = true;
}

void Engine::CloseChannel(ChannelId id, const Status& why) {
  BX_DCHECK(OnHomeThread());
  Channel* channel = Find(id);
  if (channel == nullptr || channel->closing) return;
  channel->closing = true;
  channel->FailQueuedKeepingAnnounced(why);
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
  if (!channel->current && !channel->head) {
    scheduler_.Remove(id);
    QueueClose(id, *channel);
  }
}

void Engine::MaybeRelease(ChannelId id) {
  Channel* channel = Find(id);
  if (channel == nullptr || !channel->close_sent || !channel->peer_closed || channel->current ||
      channel->head)
    return;
  scheduler_.Remove(id);
  channels_.erase(id);
  if (callbacks_.on_channel_released) callbacks_.on_channel_released(id);
}

void Engine::OnPeerOpened(ChannelId id) {
  if (id >= kMaxChannels || !channels_.try_emplace(id).second) {
    Fail(DataLoss("peer opened channel " + std::to_string(id) + ", which is in use"));
    return;
  }
  ++counters_.channels_opened;
  if (callbacks_.on_channel_open) callbacks_.on_channel_open(id);
}

bool Engine::OnPeerAccepted(ChannelId id) {
  if (Find(id) == nullptr) {
    Fail(DataLoss("peer accepted channel " + std::to_string(id) + ", never opened"));
    return false;
  }
  if (callbacks_.on_channel_accepted) callbacks_.on_channel_accepted(id);
  return true;
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

}  // namespace bx::engine
