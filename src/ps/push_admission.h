// PushAdmission: which pushed ids of a table get a row (TableConfig::admit_after_pushes = N).
// An id without a row is counted at each push and its gradient dropped until its count reaches
// N; the push that reaches it creates the row. Ids seen once or twice in a long tail never cost
// a row, an eviction or a snapshot's bytes.
//
// Counts live in a count-min sketch of 16-bit counters (kDepth rows of `width`), so memory is
// fixed whatever the id space: 4 x 262,144 x 2 bytes = 2 MiB a table by default. Updates are
// conservative (only the counters at the minimum grow), which keeps over-counts rare; an
// over-count admits an id early, never late. Every `width` counted pushes (pushes of ids
// without a row) every counter is halved, so counts describe recent pushes, a counter holds
// about one id's counts at most, and the sketch never fills with old ones: an id must reach its
// count within a few hundred thousand counted pushes of the shard's table.
//
// Decisions depend on the push stream alone (keys, their order, the table's rows), so replicas
// that apply the same pushes admit the same ids; the sketch goes into snapshots so that a
// joiner or a new primary continues from the same counts.
//
// Thread-safety: none; the owner (ShardState, serialised by ShardReplica) calls Decide and
// Commit from one push at a time. admitted() and rejected() may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bx/status.h"
#include "ps/table.h"

namespace bx::ps {

class PushAdmission {
 public:
  static constexpr uint32_t kDepth = 4;
  static constexpr uint32_t kDefaultWidth = 1u << 18;
  // Counted pushes between halvings, per counter of a row: at most one on average, so that
  // distinct ids rarely share all four counters (an early admission); more let a rarely pushed
  // id accumulate, but filled the counters: at 8, 100,000 distinct ids pushed once into 1,024
  // counters a row admitted 98% of them.
  static constexpr uint64_t kHalvingPeriodPerCounter = 1;

  // width: a power of two, 2^4..2^24.
  static Result<std::unique_ptr<PushAdmission>> Create(uint32_t admit_after_pushes,
                                                       uint32_t width = kDefaultWidth);

  // What to apply of a push, and what to count once it is applied.
  struct Decision {
    bool everything = true;         // apply the push as it is (keys, gradients unused)
    std::vector<uint64_t> keys;     // else: the occurrences kept, in push order
    std::vector<float> gradients;   // and their gradients
    std::vector<uint64_t> counted;  // occurrences of ids without a row, in push order
    uint64_t admitted = 0;          // ids this push gives a row
    uint64_t rejected = 0;          // occurrences dropped
  };
  // Splits a push to `table`: an occurrence is kept when its id has a row, or its count (this
  // occurrence included) reaches the threshold. Changes nothing: a push the table refuses must
  // not count.
  Decision Decide(const Table& table, std::span<const uint64_t> keys,
                  std::span<const float> gradients) const;
  // Counts the decided push (the table took it).
  void Commit(const Decision& decision);

  // The sketch's count of `key` (never below its true count since the last halving).
  uint32_t Estimate(uint64_t key) const;

  uint32_t admit_after_pushes() const { return threshold_; }
  uint32_t width() const { return width_; }
  uint64_t admitted() const { return admitted_.load(std::memory_order_relaxed); }
  uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }

  // Snapshot state: counters (kDepth x width, row by row), counted pushes since the last
  // halving, and the two totals.
  std::span<const uint16_t> counters() const { return counters_; }
  uint64_t since_halving() const { return since_halving_; }
  Status Restore(std::span<const uint16_t> counters, uint64_t since_halving, uint64_t admitted,
                 uint64_t rejected);
  std::unique_ptr<PushAdmission> Copy() const;

 private:
  PushAdmission(uint32_t threshold, uint32_t width);
  size_t Cell(uint32_t row, uint64_t key) const;
  void Add(uint64_t key);

  const uint32_t threshold_;
  const uint32_t width_;
  std::vector<uint16_t> counters_;
  uint64_t since_halving_ = 0;
  std::atomic<uint64_t> admitted_{0};
  std::atomic<uint64_t> rejected_{0};
};

}  // namespace bx::ps
