#include "transport/peer_limit.h"

namespace bx::transport {

PeerSlot& PeerSlot::operator=(PeerSlot&& other) noexcept {
  if (this != &other) {
    Release();
    state_ = std::move(other.state_);
    address_ = std::move(other.address_);
  }
  return *this;
}

void PeerSlot::Release() {
  if (!state_) return;
  {
    std::lock_guard lock(state_->mu);
    auto it = state_->counts.find(address_);
    if (it != state_->counts.end() && --it->second == 0) state_->counts.erase(it);
  }
  state_.reset();
}

PeerLimiter::PeerLimiter(int max_per_peer) : state_(std::make_shared<PeerSlot::State>()) {
  state_->max = max_per_peer > 0 ? size_t(max_per_peer) : 0;
}

std::optional<PeerSlot> PeerLimiter::TryAcquire(const std::string& address) {
  std::lock_guard lock(state_->mu);
  size_t& count = state_->counts[address];
  if (state_->max != 0 && count >= state_->max) {
    if (count == 0) state_->counts.erase(address);
    return std::nullopt;
  }
  ++count;
  return PeerSlot(state_, address);
}

size_t PeerLimiter::Count(const std::string& address) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->counts.find(address);
  return it == state_->counts.end() ? 0 : it->second;
}

}  // namespace bx::transport
