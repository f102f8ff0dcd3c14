// The paper's training workload (sections 2.1, 6.3, 8): parameter servers on hosts 0..S-1,
// trainers on hosts S..S+T-1. Each iteration a trainer pushes one lognormal message to every
// server, waits for all pushes to complete, fetches one lognormal message back from every
// server, then computes for compute_ns (+- jitter) before the next iteration. Trainers start at
// random offsets within one compute time, so they are loosely, not perfectly, synchronised.
//
// Victim traffic (optional, config.victim_clients): open-loop pushes to cold servers and fetches
// from cold or hot servers by hosts outside the incast, measured apart (config.h says how).
//
// Every host draws its message sizes and timings from streams of its own (one for the incast,
// one for victim traffic, so victims leave the incast's draws unchanged), and in a partitioned
// run each partition's Workload drives only its own hosts.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/config.h"
#include "sim/event_queue.h"
#include "sim/messages.h"
#include "sim/partition.h"
#include "sim/random.h"
#include "sim/stats.h"

namespace bx::sim {

class Workload : public MessageSink {
 public:
  Workload(const WorkloadConfig& config, uint64_t seed, EventQueue* events, MessageTable* messages,
           Stats* stats, const Partitioning* partitioning);
  void SetTransport(Transport* transport) { transport_ = transport; }
  void Start();
  // A kWorkload event: a = trainer or victim client index, b = TimerKind.
  enum TimerKind : uint32_t { kTrainer, kVictim };
  void OnTimer(uint32_t index, uint32_t kind);
  void OnDelivered(const Delivery& delivery) override;
  void OnSendCompleted(uint32_t message) override;
  // Pushes sent by this partition's hosts and not delivered by `end`: their ages go to the stats
  // (the counts of sent and delivered ones are there already).
  void Finish(TimeNs end);

 private:
  struct Trainer {
    uint32_t pending = 0;
    bool pushing = false;
  };
  uint32_t HostOfTrainer(uint32_t t) const { return config_.servers + t; }
  void StartPush(uint32_t trainer);
  void StartFetch(uint32_t trainer);
  void VictimTick(uint32_t client);
  void ScheduleVictim(uint32_t client, TimeNs at);
  uint32_t ColdServer(uint32_t index) const { return config_.servers + config_.trainers + index; }

  WorkloadConfig config_;
  std::vector<Random> rng_;         // by host
  std::vector<Random> victim_rng_;  // by host, apart from the incast's
  LognormalSize sizes_;
  EventQueue* events_;
  MessageTable* messages_;
  Stats* stats_;
  const Partitioning* partitioning_;
  Transport* transport_ = nullptr;
  std::vector<Trainer> trainers_;
};

}  // namespace bx::sim
