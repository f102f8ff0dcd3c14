#include "sim/switch_mmu.h"

#include <algorithm>

namespace bx::sim {

SwitchMmu::SwitchMmu(const FabricConfig& config, std::vector<uint32_t> headroom)
    : buffer_(config.buffer_bytes),
      reserve_(config.reserve_bytes),
      resume_offset_(config.resume_offset_bytes),
      shift_(config.pfc_shift),
      headroom_(std::move(headroom)),
      ingress_(headroom_.size(), 0),
      headroom_used_(headroom_.size(), 0),
      paused_(headroom_.size(), false) {
  for (uint32_t h : headroom_) {
    total_headroom_ += h;
    total_reserve_ += reserve_;
  }
}

int64_t SwitchMmu::Threshold() const {
  int64_t free_shared = int64_t(buffer_) - int64_t(total_headroom_) - int64_t(total_reserve_) -
                        int64_t(shared_used_) - int64_t(lossy_);
  return free_shared > 0 ? free_shared >> shift_ : 0;
}

void SwitchMmu::Admit(uint32_t port, uint32_t bytes) {
  occupancy_ += bytes;
  uint64_t after = ingress_[port] + bytes;
  if (after <= reserve_) {
    ingress_[port] = after;
    return;
  }
  if (int64_t(after - reserve_) > Threshold()) {
    headroom_used_[port] += bytes;
    if (headroom_used_[port] > headroom_[port]) {
      headroom_overflow_ += std::min<uint64_t>(bytes, headroom_used_[port] - headroom_[port]);
    }
    return;
  }
  ingress_[port] = after;
  shared_used_ += std::min<uint64_t>(bytes, after - reserve_);
}

void SwitchMmu::Release(uint32_t port, uint32_t bytes) {
  occupancy_ -= bytes;
  uint64_t from_headroom = std::min<uint64_t>(headroom_used_[port], bytes);
  headroom_used_[port] -= from_headroom;
  uint64_t rest = bytes - from_headroom;
  uint64_t from_shared = std::min<uint64_t>(rest, SharedUsed(port));
  ingress_[port] -= rest;
  shared_used_ -= from_shared;
}

bool SwitchMmu::ShouldPause(uint32_t port) const {
  return !paused_[port] && (headroom_used_[port] > 0 || int64_t(SharedUsed(port)) >= Threshold());
}

bool SwitchMmu::ShouldResume(uint32_t port) const {
  if (!paused_[port] || headroom_used_[port] > 0) return false;
  uint64_t shared = SharedUsed(port);
  return shared == 0 || int64_t(shared + resume_offset_) <= Threshold();
}

bool SwitchMmu::AdmitLossy(uint64_t egress_bytes, uint32_t bytes) const {
  int64_t free_buffer = int64_t(buffer_) - int64_t(occupancy_);
  return int64_t(egress_bytes + bytes) <= (free_buffer > 0 ? free_buffer >> shift_ : 0);
}

}  // namespace bx::sim
