#include "sim/workload.h"

namespace bx::sim {

Workload::Workload(const WorkloadConfig& config, uint64_t seed, EventQueue* events,
                   MessageTable* messages, Stats* stats, const Partitioning* partitioning)
    : config_(config),
      sizes_(config.mean_message_bytes, config.p99_message_bytes),
      events_(events),
      messages_(messages),
      stats_(stats),
      partitioning_(partitioning),
      trainers_(config.trainers) {
  uint32_t hosts = config.hosts();
  rng_.reserve(hosts);
  victim_rng_.reserve(hosts);
  for (uint64_t h = 0; h < hosts; ++h) {
    rng_.push_back(Random::Stream(seed, h));
    victim_rng_.push_back(Random::Stream(seed ^ 0x5eed'71c7'1a5eull, h));
  }
}

void Workload::Start() {
  for (uint32_t t = 0; config_.incast && t < config_.trainers; ++t) {
    uint32_t host = HostOfTrainer(t);
    if (!partitioning_->Owns(host)) continue;
    TimeNs offset = TimeNs(rng_[host].Uniform() * double(config_.compute_ns));
    events_->SetActor(host);
    events_->Schedule(offset, host, EventKind::kWorkload, t, kTrainer);
  }
  for (uint32_t c = 0; c < config_.victim_clients; ++c) {
    uint32_t host = config_.first_victim_client() + c;
    if (!partitioning_->Owns(host)) continue;
    events_->SetActor(host);
    ScheduleVictim(c, 0);
  }
}

void Workload::OnTimer(uint32_t index, uint32_t kind) {
  if (kind == kTrainer) {
    StartPush(index);
  } else {
    VictimTick(index);
  }
}

// The next victim request of `client`: interval x uniform [0.5, 1.5) after `at`.
void Workload::ScheduleVictim(uint32_t client, TimeNs at) {
  uint32_t host = config_.first_victim_client() + client;
  double gap = double(config_.victim_interval_ns) * (0.5 + victim_rng_[host].Uniform());
  events_->Schedule(at + TimeNs(gap), host, EventKind::kWorkload, client, kVictim);
}

void Workload::VictimTick(uint32_t client) {
  uint32_t host = config_.first_victim_client() + client;
  Random& rng = victim_rng_[host];
  TimeNs now = events_->now();
  if (config_.victim_servers > 0) {
    uint32_t cold = ColdServer(uint32_t(rng.Uniform() * config_.victim_servers));
    transport_->Send(host, cold, MessageKind::kVictimPush, sizes_.Sample(rng), now);
    ++stats_->victim_sent;
  }
  bool hot = config_.victim_fetches_hot();
  uint32_t targets = hot ? config_.servers : config_.victim_servers;
  uint32_t index = uint32_t(rng.Uniform() * targets);
  transport_->Send(host, hot ? index : ColdServer(index), MessageKind::kVictimFetchRequest,
                   config_.fetch_request_bytes, now);
  ++stats_->victim_sent;
  ScheduleVictim(client, now);
}

void Workload::StartPush(uint32_t t) {
  trainers_[t].pending = config_.servers;
  trainers_[t].pushing = true;
  uint32_t host = HostOfTrainer(t);
  for (uint32_t s = 0; s < config_.servers; ++s) {
    transport_->Send(host, s, MessageKind::kPush, sizes_.Sample(rng_[host]), events_->now());
    ++stats_->pushes_sent;
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

void Workload::OnDelivered(const Delivery& m) {
  TimeNs now = events_->now();
  switch (m.kind) {
    case MessageKind::kPush:
      stats_->push_latency_ns.push_back(now - m.started);
      ++stats_->pushes_delivered;
      break;
    case MessageKind::kFetchRequest:
      transport_->Send(m.to, m.from, MessageKind::kFetchResponse, sizes_.Sample(rng_[m.to]),
                       m.started);
      break;
    case MessageKind::kFetchResponse: {
      stats_->fetch_latency_ns.push_back(now - m.started);
      Trainer& t = trainers_[m.to - config_.servers];
      if (--t.pending == 0) {
        ++stats_->iterations;
        double jitter = config_.compute_jitter * (2 * rng_[m.to].Uniform() - 1);
        TimeNs compute = TimeNs(double(config_.compute_ns) * (1 + jitter));
        events_->Schedule(now + compute, m.to, EventKind::kWorkload, m.to - config_.servers,
                          kTrainer);
      }
      break;
    }
    case MessageKind::kVictimPush:
      stats_->victim_push_latency_ns.push_back(now - m.started);
      ++stats_->victim_done;
      break;
    case MessageKind::kVictimFetchRequest:
      transport_->Send(m.to, m.from, MessageKind::kVictimFetchResponse,
                       sizes_.Sample(victim_rng_[m.to]), m.started);
      break;
    case MessageKind::kVictimFetchResponse:
      stats_->victim_fetch_latency_ns.push_back(now - m.started);
      ++stats_->victim_done;
      break;
  }
  messages_->ReleaseDelivered(m.message);
}

void Workload::OnSendCompleted(uint32_t id) {
  Message& m = (*messages_)[id];
  if (m.kind == MessageKind::kPush) {
    Trainer& t = trainers_[m.from - config_.servers];
    if (--t.pending == 0) StartFetch(m.from - config_.servers);
  }
  messages_->Release(id);
}

void Workload::Finish(TimeNs end) {
  messages_->ForEachLive([&](const Message& m) {
    if (m.kind == MessageKind::kPush && !m.delivered) {
      stats_->push_incomplete_age_ns.push_back(end - m.enqueued);
    }
  });
}

}  // namespace bx::sim
