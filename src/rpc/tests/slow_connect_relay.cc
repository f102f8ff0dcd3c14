#include "rpc/tests/slow_connect_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace bx::rpc::testing {
namespace {

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// Copies what `from` has to `to`; false when either side closed or failed.
bool Pass(int from, int to) {
  char chunk[64 * 1024];
  ssize_t n = ::recv(from, chunk, sizeof chunk, 0);
  if (n <= 0) return false;
  for (ssize_t sent = 0; sent < n;) {
    ssize_t m = ::send(to, chunk + sent, size_t(n - sent), MSG_NOSIGNAL);
    if (m <= 0) return false;
    sent += m;
  }
  return true;
}

}  // namespace

SlowConnectRelay::SlowConnectRelay(uint16_t target_port, std::chrono::milliseconds delay)
    : target_port_(target_port), delay_(delay) {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = Loopback(0);
  socklen_t length = sizeof address;
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(listener_, 16) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::perror("SlowConnectRelay: listen");
    std::exit(1);
  }
  port_ = ntohs(address.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

SlowConnectRelay::~SlowConnectRelay() {
  stopping_ = true;
  ::shutdown(listener_, SHUT_RDWR);  // wakes accept()
  acceptor_.join();
  ::close(listener_);
  std::vector<std::thread> relays;
  {
    std::lock_guard lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);  // wakes each relay's poll()
    relays.swap(relays_);
  }
  for (std::thread& relay : relays) relay.join();
  for (int fd : fds_) ::close(fd);
}

void SlowConnectRelay::AcceptLoop() {
  while (!stopping_) {
    int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;  // shut down (stopping_ is then set) or a transient error
    accepted_.fetch_add(1);
    std::lock_guard lock(mu_);
    fds_.push_back(client);
    relays_.emplace_back([this, client] { Relay(client); });
  }
}

void SlowConnectRelay::Relay(int client) {
  // The hold: nothing the client sent reaches the server, and no answer comes back, until then.
  const auto until = std::chrono::steady_clock::now() + delay_;
  while (!stopping_ && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = Loopback(target_port_);
  {
    std::lock_guard lock(mu_);
    fds_.push_back(server);
  }
  if (stopping_ || ::connect(server, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::shutdown(client, SHUT_RDWR);
    return;
  }
  pollfd both[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
  while (!stopping_ && ::poll(both, 2, -1) > 0) {
    if ((both[0].revents & (POLLIN | POLLHUP | POLLERR)) && !Pass(client, server)) break;
    if ((both[1].revents & (POLLIN | POLLHUP | POLLERR)) && !Pass(server, client)) break;
  }
  // Either side gone: the other learns it as the peer would.
  ::shutdown(client, SHUT_RDWR);
  ::shutdown(server, SHUT_RDWR);
}

}  // namespace bx::rpc::testing
