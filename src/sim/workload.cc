#include "sim/workload.h"

namespace bx::sim {

Workload::Workload(const WorkloadConfig& config, uint64_t seed, EventQueue* events,
                   MessageTable* messages, Stats* stats)
    : config_(config),
      rng_(seed),
      sizes_(config.mean_message_bytes, config.p99_message_bytes),
      events_(events),
      messages_(messages),
      stats_(stats),
      trainers_(config.trainers) {}

void Workload::Start() {
  for (uint32_t t = 0; t < config_.trainers; ++t) {
    TimeNs offset = TimeNs(rng_.Uniform() * double(config_.compute_ns));
    events_->Schedule(offset, EventKind::kWorkload, t);
  }
}

void Workload::OnTimer(uint32_t trainer) {
  StartPush(trainer);
}

void Workload::StartPush(uint32_t t) {
  trainers_[t].pending = config_.servers;
  trainers_[t].pushing = true;
  for (uint32_t s = 0; s < config_.servers; ++s) {
    transport_->Send(HostOfTrainer(t), s, MessageKind::kPush, sizes_.Sample(rng_), events_->now());
    ++pushes_sent_;
  }
}

void Workload::StartFetch(uint32_t t) {
  trainers_[t].pending = config_.servers;
  trainers_[t].pushing = false;
  for (uint32_t s = 0; s < config_.servers; ++s) {
    transport_->Send(HostOfTrainer(t), s, MessageKind::kFetchRequest, config_.fetch_request_bytes,
                     events_->now());
  }
}

void Workload::OnDelivered(uint32_t id) {
  Message& m = (*messages_)[id];
  TimeNs now = events_->now();
  switch (m.kind) {
    case MessageKind::kPush:
      stats_->push_latency_ns.push_back(now - m.enqueued);
      ++pushes_delivered_;
      break;
    case MessageKind::kFetchRequest:
      transport_->Send(m.to, m.from, MessageKind::kFetchResponse, sizes_.Sample(rng_), m.enqueued);
      break;
    case MessageKind::kFetchResponse: {
      stats_->fetch_latency_ns.push_back(now - m.origin);
      Trainer& t = trainers_[m.to - config_.servers];
      if (--t.pending == 0) {
        ++stats_->iterations;
        double jitter = config_.compute_jitter * (2 * rng_.Uniform() - 1);
        TimeNs compute = TimeNs(double(config_.compute_ns) * (1 + jitter));
        events_->Schedule(now + compute, EventKind::kWorkload, m.to - config_.servers);
      }
      break;
    }
  }
  messages_->Release(id);
}

void Workload::OnSendCompleted(uint32_t id) {
  Message& m = (*messages_)[id];
  if (m.kind == MessageKind::kPush) {
    Trainer& t = trainers_[m.from - config_.servers];
    if (--t.pending == 0) StartFetch(m.from - config_.servers);
  }
  messages_->Release(id);
}

void Workload::Finish() {
  stats_->push_incomplete = pushes_sent_ - pushes_delivered_;
}

}  // namespace bx::sim
