// Engine failure: the QP goes to the error state, every message completes with the reason, and
// every buffer the NIC may still touch is kept until the engine is destroyed.
#include <cstring>
#include <string>

#include "bx/log.h"
#include "engine/engine.h"
#include "engine/engine_internal.h"

namespace bx::engine {

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
  windows_.Clear();
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
  ahead_messages_ = ahead_bytes_ = 0;
  if (notify && callbacks_.on_failure) callbacks_.on_failure(why);
}

}  // namespace bx::engine
