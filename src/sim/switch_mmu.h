// Shared-buffer memory management of one switch: dynamic-threshold PFC for the lossless class
// (as HPCC's switch-mmu.cc describes it), and egress dynamic-threshold drops for the lossy class.
//
// Each ingress port-queue owns `reserve` bytes; beyond that it draws on the shared pool; once its
// shared use reaches the threshold, arriving bytes go to its headroom and the port pauses its
// upstream. threshold = (buffer - total headroom - total reserve - shared used) >> shift.
// XOFF when headroom is in use or shared use >= threshold; XON when the headroom is empty and
// shared use + resume offset <= threshold (or shared use is 0). Single-threaded.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/config.h"

namespace bx::sim {

class SwitchMmu {
 public:
  // `headroom` per port, by local port index.
  SwitchMmu(const FabricConfig& config, std::vector<uint32_t> headroom);

  int64_t Threshold() const;
  uint64_t SharedUsed(uint32_t port) const {
    return ingress_[port] > reserve_ ? ingress_[port] - reserve_ : 0;
  }

  // Lossless arrival on ingress `port`.
  void Admit(uint32_t port, uint32_t bytes);
  // Departure of a lossless packet that arrived on `port`.
  void Release(uint32_t port, uint32_t bytes);
  bool ShouldPause(uint32_t port) const;
  bool ShouldResume(uint32_t port) const;
  void SetPaused(uint32_t port, bool paused) { paused_[port] = paused; }
  bool paused(uint32_t port) const { return paused_[port]; }

  // Lossy class: may a packet of `bytes` join egress queue holding `egress_bytes`?
  bool AdmitLossy(uint64_t egress_bytes, uint32_t bytes) const;
  void AddLossy(uint32_t bytes) {
    lossy_ += bytes;
    occupancy_ += bytes;
  }
  void RemoveLossy(uint32_t bytes) {
    lossy_ -= bytes;
    occupancy_ -= bytes;
  }

  uint64_t occupancy() const { return occupancy_; }
  uint64_t headroom_bytes(uint32_t port) const { return headroom_used_[port]; }
  // Bytes admitted beyond a port's configured headroom (a lossless fabric would have dropped).
  uint64_t headroom_overflow() const { return headroom_overflow_; }

 private:
  uint64_t buffer_;
  uint32_t reserve_;
  uint32_t resume_offset_;
  uint32_t shift_;
  uint64_t total_headroom_ = 0;
  uint64_t total_reserve_ = 0;
  uint64_t shared_used_ = 0;
  uint64_t occupancy_ = 0;
  uint64_t lossy_ = 0;
  uint64_t headroom_overflow_ = 0;
  std::vector<uint32_t> headroom_;
  std::vector<uint64_t> ingress_;
  std::vector<uint64_t> headroom_used_;
  std::vector<bool> paused_;
};

}  // namespace bx::sim
