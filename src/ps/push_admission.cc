#include "ps/push_admission.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "bx/ps/cluster.h"  // Mix64

namespace bx::ps {

Result<std::unique_ptr<PushAdmission>> PushAdmission::Create(uint32_t admit_after_pushes,
                                                             uint32_t width) {
  if (!std::has_single_bit(width) || width < (1u << 4) || width > (1u << 24)) {
    return InvalidArgument("push admission: width " + std::to_string(width) +
                           " is not a power of two in 2^4..2^24");
  }
  if (admit_after_pushes < 2 || admit_after_pushes > kMaxAdmitAfterPushes) {
    return InvalidArgument("push admission: admit_after_pushes must be 2.." +
                           std::to_string(kMaxAdmitAfterPushes));
  }
  return std::unique_ptr<PushAdmission>(new PushAdmission(admit_after_pushes, width));
}

PushAdmission::PushAdmission(uint32_t threshold, uint32_t width)
    : threshold_(threshold), width_(width), counters_(size_t{kDepth} * width) {}

// One independent-looking hash per row: the key mixed with the row number.
size_t PushAdmission::Cell(uint32_t row, uint64_t key) const {
  return size_t{row} * width_ + (Mix64(key + 0x9e3779b97f4a7c15ull * (row + 1)) & (width_ - 1));
}

uint32_t PushAdmission::Estimate(uint64_t key) const {
  uint32_t least = std::numeric_limits<uint16_t>::max();
  for (uint32_t row = 0; row < kDepth; ++row) {
    least = std::min<uint32_t>(least, counters_[Cell(row, key)]);
  }
  return least;
}

void PushAdmission::Add(uint64_t key) {
  const uint32_t least = Estimate(key);
  if (least < std::numeric_limits<uint16_t>::max()) {
    for (uint32_t row = 0; row < kDepth; ++row) {
      uint16_t& c = counters_[Cell(row, key)];
      if (c == least) ++c;  // conservative update
    }
  }
  if (++since_halving_ >= uint64_t{width_} * kHalvingPeriodPerCounter) {
    for (uint16_t& c : counters_) c >>= 1;
    since_halving_ = 0;
  }
}

PushAdmission::Decision PushAdmission::Decide(const Table& table, std::span<const uint64_t> keys,
                                              std::span<const float> gradients) const {
  Decision d;
  const size_t dim = table.dim();
  std::unordered_map<uint64_t, uint32_t> counted;  // this push's own counts, not yet in the sketch
  std::unordered_set<uint64_t> admitted;
  std::vector<bool> keep(keys.size(), true);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t key = keys[i];
    if (admitted.contains(key) || table.Contains(key)) continue;
    d.counted.push_back(key);
    const uint32_t count = Estimate(key) + ++counted[key];
    if (count >= threshold_) {
      admitted.insert(key);
      ++d.admitted;
    } else {
      keep[i] = false;
      ++d.rejected;
    }
  }
  if (d.rejected == 0) return d;
  d.everything = false;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keep[i]) continue;
    d.keys.push_back(keys[i]);
    d.gradients.insert(d.gradients.end(), gradients.begin() + i * dim,
                       gradients.begin() + (i + 1) * dim);
  }
  return d;
}

void PushAdmission::Commit(const Decision& decision) {
  for (uint64_t key : decision.counted) Add(key);
  admitted_.fetch_add(decision.admitted, std::memory_order_relaxed);
  rejected_.fetch_add(decision.rejected, std::memory_order_relaxed);
}

Status PushAdmission::Restore(std::span<const uint16_t> counters, uint64_t since_halving,
                              uint64_t admitted, uint64_t rejected) {
  if (counters.size() != counters_.size()) {
    return InvalidArgument("push admission: " + std::to_string(counters.size()) +
                           " counters, expected " + std::to_string(counters_.size()));
  }
  std::copy(counters.begin(), counters.end(), counters_.begin());
  since_halving_ = since_halving;
  admitted_.store(admitted, std::memory_order_relaxed);
  rejected_.store(rejected, std::memory_order_relaxed);
  return Status::Ok();
}

std::unique_ptr<PushAdmission> PushAdmission::Copy() const {
  auto copy = std::unique_ptr<PushAdmission>(new PushAdmission(threshold_, width_));
  copy->counters_ = counters_;
  copy->since_halving_ = since_halving_;
  copy->admitted_.store(admitted());
  copy->rejected_.store(rejected());
  return copy;
}

}  // namespace bx::ps
