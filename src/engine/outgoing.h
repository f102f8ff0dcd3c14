// Engine::Outgoing: the engine's node for one message on its way out. A sender on another
// thread may allocate it (Engine::NewOutgoing, NewWrite) and keep it on its own queue, linked
// through `next`, until it hands it to the engine on the I/O thread: one allocation a message.
// The other fields are the engine's.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/engine.h"

namespace bx::engine {

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

}  // namespace bx::engine
