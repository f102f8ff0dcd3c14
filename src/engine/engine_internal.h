// What the engine's source files share (engine*.cc): a channel's sending state and the receive
// tag. Not for users of Engine.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/engine.h"
#include "engine/outgoing.h"

namespace bx::engine {

// Receive work requests carry this bit in wr_id: error completions have no reliable opcode, so
// the wr_id is what tells a failed receive from a failed send.
inline constexpr uint64_t kReceiveTag = uint64_t{1} << 63;

// A logical socket's sending state. Idle channels cost a few words: 10,000 sockets on one engine
// are 10,000 of these.
struct Engine::Channel {
  std::unique_ptr<Outgoing> head;  // messages not started yet, oldest first
  Outgoing* tail = nullptr;
  // The first `ahead` queued messages are rendezvous messages announced ahead: their requests
  // are out (state kAwaitingReply, or kWriting once the reply is in), their data waits its turn.
  uint32_t ahead = 0;
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
    ahead = 0;
  }
  // The channel closes: every queued message completes with `why`. Those announced ahead stay
  // queued, abandoned, since the peer holds (or will hold) a destination for each that only a
  // rendezvous abort frees; the rest are dropped.
  void FailQueuedKeepingAnnounced(const Status& why) {
    Outgoing* last_kept = nullptr;
    std::unique_ptr<Outgoing>* link = &head;
    for (uint32_t i = 0; i < ahead && *link; ++i) {
      Outgoing& out = **link;
      if (auto done = std::move(out.message.done)) done(why);
      out.abandoned = true;
      last_kept = &out;
      link = &out.next;
    }
    std::unique_ptr<Outgoing> rest = std::move(*link);
    tail = last_kept;
    while (rest) {
      std::unique_ptr<Outgoing> out = std::move(rest);
      rest = std::move(out->next);
      if (out->message.done) out->message.done(why);
    }
  }
};

}  // namespace bx::engine
