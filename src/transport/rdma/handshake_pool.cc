#include "transport/rdma/handshake_pool.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace bx::rdma {

bool HandshakePool::Start(int fd, const std::string& host, std::function<void(int)> handshake) {
  std::map<uint64_t, std::unique_ptr<Handshake>> finished;  // joined after the lock is released
  std::lock_guard lock(mu_);
  ReapLocked(finished);
  auto count = per_host_.find(host);
  if (closed_ || handshakes_.size() >= limits_.total ||
      (count != per_host_.end() && count->second >= limits_.per_host))
    return false;
  int wake_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (wake_fd < 0) return false;  // out of descriptors: refuse like any other overload
  ++per_host_[host];
  auto h = std::make_unique<Handshake>();
  h->wake_fd = wake_fd;
  h->host = host;
  Handshake* raw = h.get();
  handshakes_[next_id_++] = std::move(h);
  raw->thread = std::thread([this, raw, fd, handshake = std::move(handshake)] {
    handshake(fd);
    std::lock_guard lock(mu_);
    raw->done = true;
    ::close(raw->wake_fd);
    if (--per_host_[raw->host] == 0) per_host_.erase(raw->host);
  });
  return true;
}

// Moves finished handshakes into `finished`, whose threads the caller joins once mu_ is released
// (destroying a Handshake joins it): a finished thread may still be returning from its lock.
void HandshakePool::ReapLocked(std::map<uint64_t, std::unique_ptr<Handshake>>& finished) {
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    if (it->second->done) {
      finished.insert(handshakes_.extract(it++));
    } else {
      ++it;
    }
  }
}

size_t HandshakePool::running() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [id, h] : handshakes_) n += h->done ? 0 : 1;
  return n;
}

void HandshakePool::Close() {
  std::map<uint64_t, std::unique_ptr<Handshake>> all;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (const auto& [id, h] : handshakes_)
      if (!h->done) ::shutdown(h->wake_fd, SHUT_RDWR);
    all.swap(handshakes_);
  }
  all.clear();  // joins
}

}  // namespace bx::rdma
