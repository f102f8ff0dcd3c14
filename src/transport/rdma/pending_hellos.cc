#include "transport/rdma/pending_hellos.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "transport/socket_util.h"

namespace bx::rdma {

void PendingHellos::Evict(size_t index, std::vector<Dropped>& dropped) {
  // Says which bound bound: with the process's descriptor limit low, the total is its share.
  dropped.push_back({pending_[index].peer,
                     ResourceExhausted("evicted before its hello by newer connections (at most " +
                                       std::to_string(limits_.per_host) + " per address, " +
                                       std::to_string(limits_.total) + " in all)")});
  ::close(pending_[index].fd);
  Forget(index);
}

bool PendingHellos::EvictOldest(std::vector<Dropped>& dropped) {
  if (pending_.empty()) return false;
  Evict(0, dropped);
  return true;
}

void PendingHellos::Add(int fd, std::string peer, std::string host, std::vector<Dropped>& dropped) {
  auto evict = [&](size_t index) { Evict(index, dropped); };
  if (auto it = per_host_.find(host); it != per_host_.end() && it->second >= limits_.per_host) {
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].host == host) {
        evict(i);
        break;
      }
    }
  }
  if (pending_.size() >= limits_.total) evict(0);
  ++per_host_[host];
  pending_.push_back({fd, std::move(peer), std::move(host), Clock::now() + limits_.timeout});
}

void PendingHellos::AppendPollFds(std::vector<pollfd>& fds) const {
  for (const Pending& p : pending_) fds.push_back({p.fd, POLLIN, 0});
}

void PendingHellos::Service(const std::vector<pollfd>& fds, size_t first,
                            std::vector<Arrived>& arrived, std::vector<Dropped>& dropped) {
  const Clock::time_point now = Clock::now();
  // Walk backwards so erasing leaves the indices still to visit in place.
  for (size_t i = pending_.size(); i-- > 0;) {
    Pending& p = pending_[i];
    const short revents = first + i < fds.size() ? fds[first + i].revents : 0;
    Status failed;
    if (revents != 0) {
      ssize_t n = ::recv(p.fd, p.raw.data() + p.got, p.raw.size() - p.got, MSG_DONTWAIT);
      if (n > 0) {
        p.got += size_t(n);
      } else if (n == 0) {
        failed = Aborted("peer closed the bootstrap connection before sending hello (" +
                         std::to_string(p.got) + " of " + std::to_string(kRecordBytes) + " bytes)");
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        failed = Status::FromErrno(errno, "bootstrap hello");
      }
    }
    if (failed.ok() && p.got == p.raw.size()) {
      transport::SetBlocking(p.fd);  // the handshake thread reads with deadlines
      arrived.push_back({p.fd, p.peer, p.host, p.raw});
      Forget(i);
      continue;
    }
    if (failed.ok() && now >= p.deadline) {
      failed = DeadlineExceeded("no hello within " + std::to_string(limits_.timeout.count()) +
                                " ms (" + std::to_string(p.got) + " of " +
                                std::to_string(kRecordBytes) + " bytes)");
    }
    if (!failed.ok()) {
      dropped.push_back({p.peer, failed});
      ::close(p.fd);
      Forget(i);
    }
  }
}

int PendingHellos::MillisecondsToNextDeadline() const {
  if (pending_.empty()) return -1;
  // Deadlines are in arrival order, so the oldest is the nearest.
  auto left =
      std::chrono::ceil<std::chrono::milliseconds>(pending_.front().deadline - Clock::now());
  return int(std::max<int64_t>(0, left.count()));
}

void PendingHellos::Forget(size_t index) {
  auto it = per_host_.find(pending_[index].host);
  if (--it->second == 0) per_host_.erase(it);
  pending_.erase(pending_.begin() + std::ptrdiff_t(index));
}

void PendingHellos::CloseAll() {
  for (const Pending& p : pending_) ::close(p.fd);
  pending_.clear();
  per_host_.clear();
}

}  // namespace bx::rdma
