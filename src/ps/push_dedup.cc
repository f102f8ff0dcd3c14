#include "ps/push_dedup.h"

#include <algorithm>
#include <string>

namespace bx::ps {

PushDedup::Verdict PushDedup::Check(PushId id) const {
  uint64_t contiguous = 0;
  const Client* client = nullptr;
  if (auto it = clients_.find(id.client_id); it != clients_.end()) {
    client = &it->second;
    contiguous = client->contiguous;
  }
  if (id.sequence <= contiguous) return Verdict::kDuplicate;
  if (id.sequence - contiguous > options_.window) return Verdict::kTooFarAhead;
  if (client != nullptr && client->recent.contains(id.sequence)) return Verdict::kDuplicate;
  return Verdict::kNew;
}

void PushDedup::MarkApplied(PushId id) {
  auto it = clients_.find(id.client_id);
  if (it == clients_.end()) {
    if (clients_.size() >= options_.max_clients) EvictLeastRecent();
    it = clients_.emplace(id.client_id, Client{}).first;
  }
  Client& c = it->second;
  c.last_use = ++tick_;
  if (id.sequence != c.contiguous + 1) {
    c.recent.insert(id.sequence);
    return;
  }
  ++c.contiguous;
  // Absorb the pushes that had overtaken this one.
  while (!c.recent.empty() && *c.recent.begin() == c.contiguous + 1) {
    c.recent.erase(c.recent.begin());
    ++c.contiguous;
  }
}

void PushDedup::EvictLeastRecent() {
  auto oldest = std::min_element(
      clients_.begin(), clients_.end(),
      [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
  if (oldest != clients_.end()) clients_.erase(oldest);
}

std::vector<PushDedup::ClientState> PushDedup::Export() const {
  std::vector<ClientState> out;
  out.reserve(clients_.size());
  for (const auto& [id, c] : clients_) {
    out.push_back(ClientState{id, c.contiguous, {c.recent.begin(), c.recent.end()}});
  }
  std::sort(out.begin(), out.end(),
            [](const ClientState& a, const ClientState& b) { return a.client_id < b.client_id; });
  return out;
}

Status PushDedup::Import(const std::vector<ClientState>& clients) {
  std::unordered_map<uint64_t, Client> imported;
  uint64_t tick = 0;
  for (const ClientState& s : clients) {
    Client c;
    c.contiguous = s.contiguous;
    c.last_use = ++tick;
    for (uint64_t seq : s.recent) {
      if (seq <= s.contiguous + 1 || seq - s.contiguous > options_.window) {
        return DataLoss("push dedup: client " + std::to_string(s.client_id) + " sequence " +
                        std::to_string(seq) + " outside its window");
      }
      c.recent.insert(seq);
    }
    if (!imported.emplace(s.client_id, std::move(c)).second) {
      return DataLoss("push dedup: client " + std::to_string(s.client_id) + " appears twice");
    }
  }
  clients_ = std::move(imported);
  tick_ = tick;
  return Status::Ok();
}

}  // namespace bx::ps
