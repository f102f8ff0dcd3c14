// The engine's construction, its completion demultiplexer and its counters. The rest is split by
// concern (engine.h lists the files).
#include "engine/engine.h"

#include <string>

#include "base/dcheck.h"
#include "engine/engine_internal.h"

namespace bx::engine {

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
          {"rendezvous_ahead", rendezvous_ahead},
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
      scheduler_(config.fragment_bytes),
      windows_(qp, lib, config.scoped_remote_writes) {}

// The window pool's destructor then deallocates its windows, before the members holding the
// buffers they cover are destroyed.
Engine::~Engine() {
  if (!failed_) Fail(Aborted("engine destroyed"), /*notify=*/false);
}

void Engine::SetPeer(const PeerLimits& peer) {
  peer_ = peer;
  credits_ = SendCredits(peer.recv_queue_depth);
}

void Engine::Start() {
  started_ = true;
  dirty_ = true;
}

void Engine::OnCompletion(const ibv_wc& wc) {
  BX_DCHECK(OnHomeThread());
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

EngineCounters Engine::counters() const {
  EngineCounters c = counters_;
  c.batches = chain_.batches();
  c.requests_posted = chain_.requests_posted();
  c.channels_open = channels_.size();
  c.window_stalls = window_.stalls();
  c.max_outstanding_bytes = window_.max_outstanding();
  c.window_bytes = window_.limit();
  c.scheduler_rounds = scheduler_.rounds();
  c.windows_allocated = windows_.allocated();
  c.windows_bound = windows_.bound();
  c.windows_invalidated = windows_.invalidated();
  c.unscoped_rendezvous = windows_.unscoped();
  return c;
}

}  // namespace bx::engine
