#include "transport/rdma/handshake_pool.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <system_error>

namespace bx::rdma {

HandshakePool::Running::~Running() {
  if (thread.joinable()) thread.join();  // never with mu_ held: the thread's last step takes it
}

bool HandshakePool::Start(int fd, const std::string& host, Handshake handshake) {
  Map finished;  // joined once the lock is released (declared before it, destroyed after)
  std::lock_guard lock(mu_);
  ReapLocked(finished);
  if (closed_) return false;
  // Make room: the address's own oldest first, then the oldest of all.
  if (auto it = per_host_.find(host); it != per_host_.end() && it->second >= limits_.per_host) {
    EvictOldestLocked(&host);
  }
  if (live_ >= limits_.total) EvictOldestLocked(nullptr);
  auto h = std::make_unique<Running>();
  h->wake_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (h->wake_fd < 0) return false;  // out of descriptors
  h->host = host;
  Running* raw = h.get();
  try {
    raw->thread = std::thread([this, raw, fd, handshake = std::move(handshake)] {
      handshake(fd, raw->evicted);
      std::lock_guard lock(mu_);
      raw->done = true;
      ::close(raw->wake_fd);
      if (!raw->evicted) {
        --live_;
        if (--per_host_[raw->host] == 0) per_host_.erase(raw->host);
      }
    });
  } catch (const std::system_error&) {  // out of threads
    ::close(raw->wake_fd);
    return false;
  }
  ++live_;
  ++per_host_[host];
  handshakes_[next_id_++] = std::move(h);
  return true;
}

void HandshakePool::EvictOldestLocked(const std::string* host) {
  for (auto& [id, h] : handshakes_) {  // in start order
    if (h->done || h->evicted || (host != nullptr && h->host != *host)) continue;
    h->evicted = true;
    ::shutdown(h->wake_fd, SHUT_RDWR);
    --live_;
    if (--per_host_[h->host] == 0) per_host_.erase(h->host);
    return;
  }
}

// Moves finished handshakes into `finished`, whose threads the caller joins once mu_ is released
// (destroying a Running joins it): a finished thread may still be returning from its lock.
void HandshakePool::ReapLocked(Map& finished) {
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    if (it->second->done) {
      finished.insert(handshakes_.extract(it++));
    } else {
      ++it;
    }
  }
}

void HandshakePool::Close() {
  Map all;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (auto& [id, h] : handshakes_) {
      if (h->done) continue;
      h->evicted = true;  // not the peer's doing; the thread no longer counts itself
      ::shutdown(h->wake_fd, SHUT_RDWR);
    }
    live_ = 0;
    per_host_.clear();
    all.swap(handshakes_);
  }
  all.clear();  // joins
}

}  // namespace bx::rdma
