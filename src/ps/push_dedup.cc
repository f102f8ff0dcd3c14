#include "ps/push_dedup.h"

#include <algorithm>
#include <string>

namespace bx::ps {

PushDedup::Verdict PushDedup::Check(PushId id, uint64_t key) const {
  auto it = clients_.find(id.client_id);
  if (it == clients_.end()) {
    if (Generation(id.client_id) < min_generation_) return Verdict::kExpired;
    if (id.sequence > options_.window) return Verdict::kTooFarAhead;
    if (id.sequence != 1 && recent_count_ >= options_.max_recent) return Verdict::kRecordFull;
    return Verdict::kNew;
  }
  const Client& c = it->second;
  if (c.key != key) return Verdict::kWrongKey;
  if (id.sequence <= c.contiguous || c.recent.contains(id.sequence)) return Verdict::kDuplicate;
  if (id.sequence - c.contiguous > options_.window) return Verdict::kTooFarAhead;
  if (id.sequence != c.contiguous + 1 && recent_count_ >= options_.max_recent) {
    return Verdict::kRecordFull;
  }
  return Verdict::kNew;
}

void PushDedup::MarkApplied(PushId id, uint64_t key) {
  auto it = clients_.find(id.client_id);
  if (it == clients_.end()) {
    if (clients_.size() >= options_.max_clients) EvictOne();
    it = clients_.emplace(id.client_id, Client{.key = key}).first;
    once_.push_back(id.client_id);
    it->second.position = std::prev(once_.end());
  } else {
    // Most recently active now; a second push makes it a repeat client.
    Client& c = it->second;
    std::list<uint64_t>& from = ListOf(c);
    c.repeat = true;
    repeat_.splice(repeat_.end(), from, c.position);
  }
  Client& c = it->second;
  if (id.sequence != c.contiguous + 1) {
    recent_count_ += c.recent.insert(id.sequence).second ? 1 : 0;
    return;
  }
  ++c.contiguous;
  // Absorb the pushes that had overtaken this one.
  while (!c.recent.empty() && *c.recent.begin() == c.contiguous + 1) {
    c.recent.erase(c.recent.begin());
    --recent_count_;
    ++c.contiguous;
  }
}

void PushDedup::EvictOne() {
  // One-off clients go first while they fill more than a quarter of the record (a flood of
  // new ids evicts its own kind); below that the least recently active repeat client goes, so
  // a record full of finished jobs' trainers makes room for new ones instead of new clients
  // evicting each other.
  const bool one_off =
      !once_.empty() && (repeat_.empty() || once_.size() > options_.max_clients / 4);
  std::list<uint64_t>& from = one_off ? once_ : repeat_;
  if (from.empty()) return;
  const uint64_t id = from.front();
  from.pop_front();
  auto it = clients_.find(id);
  recent_count_ -= it->second.recent.size();
  clients_.erase(it);
  min_generation_ = std::max<uint64_t>(min_generation_, uint64_t{Generation(id)} + 1);
  ++evictions_;
}

PushDedup::Record PushDedup::Export() const {
  Record out;
  out.min_generation = min_generation_;
  out.clients.reserve(clients_.size());
  for (const std::list<uint64_t>* list : {&once_, &repeat_}) {
    for (uint64_t id : *list) {
      const Client& c = clients_.at(id);
      out.clients.push_back(
          ClientState{id, c.key, c.contiguous, {c.recent.begin(), c.recent.end()}, c.repeat});
    }
  }
  return out;
}

Status PushDedup::Import(const Record& record) {
  if (record.clients.size() > options_.max_clients) {
    return DataLoss("push dedup: " + std::to_string(record.clients.size()) +
                    " clients, above the bound of " + std::to_string(options_.max_clients));
  }
  if (record.min_generation > (uint64_t{1} << 32)) {
    return DataLoss("push dedup: min generation out of range");
  }
  std::unordered_map<uint64_t, Client> imported;
  std::list<uint64_t> once, repeat;
  size_t recent = 0;
  for (const ClientState& s : record.clients) {
    Client c{.key = s.key, .contiguous = s.contiguous, .repeat = s.repeat};
    for (uint64_t seq : s.recent) {
      if (seq <= s.contiguous + 1 || seq - s.contiguous > options_.window) {
        return DataLoss("push dedup: client " + std::to_string(s.client_id) + " sequence " +
                        std::to_string(seq) + " outside its window");
      }
      c.recent.insert(seq);
    }
    recent += c.recent.size();
    std::list<uint64_t>& list = s.repeat ? repeat : once;
    list.push_back(s.client_id);
    c.position = std::prev(list.end());
    if (!imported.emplace(s.client_id, std::move(c)).second) {
      return DataLoss("push dedup: client " + std::to_string(s.client_id) + " appears twice");
    }
  }
  clients_ = std::move(imported);
  once_ = std::move(once);
  repeat_ = std::move(repeat);
  min_generation_ = record.min_generation;
  recent_count_ = recent;
  return Status::Ok();
}

}  // namespace bx::ps
