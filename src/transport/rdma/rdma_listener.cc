// RdmaListener (rdma_listener.h): the accept loop, its bounds, and the admission of each peer
// before anything is allocated for it.
#include "transport/rdma/rdma_listener.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <optional>

#include "base/unique_fd.h"
#include "bx/log.h"
#include "transport/descriptor_budget.h"
#include "transport/rdma/rdma_transport_impl.h"

namespace bx::rdma {
namespace {

// An accepted connection waits for its Hello in the accept loop (PendingHellos: no thread; 2 s,
// since a connecting peer sends it at once), then has 5 s for the rest of its handshake on a
// thread of its own (HandshakePool). Beyond either's bounds per remote address and in total,
// the oldest is evicted. A client opens one bootstrap connection per engine, so the per-address
// bounds are far above what a legitimate host has in flight at one moment.
// Both totals also fit the listener's share of the process's descriptors
// (transport/descriptor_budget.h): three quarters for Hellos, a quarter for handshakes.
constexpr PendingHellos::Limits kHelloLimits{64, 4096, std::chrono::milliseconds{2000}};
constexpr std::chrono::milliseconds kAcceptHandshakeTimeout{5000};
constexpr HandshakePool::Limits kHandshakeLimits{16, 256};

PendingHellos::Limits HelloLimits(size_t budget) {
  PendingHellos::Limits limits = kHelloLimits;
  limits.total = std::clamp<size_t>(budget - budget / 4, 8, kHelloLimits.total);
  limits.per_host = std::min(limits.per_host, limits.total);
  return limits;
}

HandshakePool::Limits HandshakeLimits(size_t budget) {
  HandshakePool::Limits limits = kHandshakeLimits;
  limits.total = std::clamp<size_t>(budget / 4, 4, kHandshakeLimits.total);
  limits.per_host = std::min(limits.per_host, limits.total);
  return limits;
}
// How often the acceptor looks at its stop flag.
constexpr int kAcceptPollMs = 100;
// How long the acceptor waits when accept fails for want of descriptors and none can be freed.
constexpr std::chrono::milliseconds kNoDescriptorBackoff{10};

}  // namespace

RdmaListener::RdmaListener(RdmaTransportImpl& transport, transport::ListeningSocket socket,
                           AcceptHandler on_accept)
    : transport_(transport),
      socket_(std::move(socket)),
      accept_(std::make_shared<AcceptState>()),
      budget_(
          transport::UnauthenticatedDescriptorBudget(kHelloLimits.total + kHandshakeLimits.total)),
      hellos_(HelloLimits(budget_)),
      handshakes_(HandshakeLimits(budget_)) {
  accept_->on_accept = std::move(on_accept);
  thread_ = std::thread([this] { AcceptLoop(); });
}

void RdmaListener::Close() {
  if (stop_.exchange(true)) return;
  accept_->closed = true;  // channels opened on existing engines are refused from now on
  if (thread_.joinable()) thread_.join();
  handshakes_.Close();  // aborts handshakes in progress
  ::close(socket_.fd);
  std::lock_guard lock(transport_.mu_);
  std::erase(transport_.listeners_, this);
}

void RdmaListener::AcceptLoop() {
  std::vector<pollfd> fds;
  std::vector<PendingHellos::Arrived> arrived;
  std::vector<PendingHellos::Dropped> dropped;
  while (!stop_.load()) {
    fds.assign(1, pollfd{socket_.fd, POLLIN, 0});
    hellos_.AppendPollFds(fds);
    int wait = hellos_.MillisecondsToNextDeadline();
    wait = wait < 0 ? kAcceptPollMs : std::min(wait, kAcceptPollMs);
    if (poll(fds.data(), fds.size(), wait) < 0) continue;
    hellos_.Service(fds, 1, arrived, dropped);
    if ((fds[0].revents & POLLIN) != 0) AcceptOne(dropped);
    for (const PendingHellos::Dropped& d : dropped) Refused(d.peer, d.why);
    for (PendingHellos::Arrived& a : arrived) StartHandshake(std::move(a));
    arrived.clear();
    dropped.clear();
  }
  hellos_.CloseAll();  // the listener closed: not the peers' doing
}

void RdmaListener::AcceptOne(std::vector<PendingHellos::Dropped>& dropped) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  int fd = accept4(socket_.fd, reinterpret_cast<sockaddr*>(&address), &length,
                   SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    // Out of descriptors: free one held by the oldest silent connection, or wait a moment
    // rather than spin on a listening socket that stays readable.
    if (errno == EMFILE || errno == ENFILE) {
      if (!hellos_.EvictOldest(dropped)) std::this_thread::sleep_for(kNoDescriptorBackoff);
    }
    return;
  }
  (void)transport::SetNoDelay(fd);
  std::string peer =
      transport::FormatAddress("rdma", reinterpret_cast<sockaddr*>(&address), length);
  std::string host = transport::FormatHost(reinterpret_cast<sockaddr*>(&address), length);
  hellos_.Add(fd, std::move(peer), std::move(host), dropped);
}

void RdmaListener::StartHandshake(PendingHellos::Arrived arrived) {
  const int fd = arrived.fd;
  const std::string host = arrived.host;
  std::string peer = arrived.peer;
  bool started = handshakes_.Start(
      fd, host, [this, arrived = std::move(arrived)](int fd, const std::atomic<bool>& evicted) {
        Admit(fd, arrived, evicted);
      });
  if (!started) {  // out of threads or descriptors
    ::close(fd);
    Refused(peer, ResourceExhausted("no thread or descriptor for its handshake"));
  }
}

void RdmaListener::Refused(const std::string& peer, const Status& why) {
  transport_.peers_refused_.fetch_add(1, std::memory_order_relaxed);
  refusals_.Log(peer, why);
}

// Everything up to EstablishAccepting runs before anything is allocated for the peer: its
// Hello, the authentication (bootstrap_auth.h) and the per-address limit. A refused peer gets a
// Refusal saying why and sees the connection close.
void RdmaListener::Admit(int fd, const PendingHellos::Arrived& arrived,
                         const std::atomic<bool>& evicted) {
  UniqueFd owned(fd);  // the pool handed it over: closed here or passed on to the connection
  const std::string& peer = arrived.peer;
  const std::string& host = arrived.host;
  const TransportOptions& options = transport_.options();
  auto deadline = std::chrono::steady_clock::now() + kAcceptHandshakeTimeout;
  auto refused = [&](const Status& why) {
    owned.reset();  // before counting it: whoever sees the count finds the connection closed
    if (stop_.load()) return;  // the listener closed: not the peer's doing
    Refused(peer, evicted ? ResourceExhausted("evicted to make room for newer handshakes") : why);
  };
  Result<Hello> hello = DecodeHello(arrived.raw.data());
  if (!hello.ok()) {
    // A peer of another version is told why; a malformed one is not worth an answer.
    if (hello.status().code() == StatusCode::kFailedPrecondition)
      SendVersionRefusal(fd, arrived.raw.data(), deadline);
    return refused(hello.status());
  }
  auto auth = AuthenticateConnectingPeer(fd, *hello, arrived.raw.data(), options.auth_secret,
                                         options.privileged_secret, deadline);
  if (!auth.ok()) return refused(auth.status());
  std::optional<transport::PeerSlot> slot = transport_.limiter_.TryAcquire(host);
  if (!slot) {
    SendRefusal(fd, transport::auth::Refusal::kTooManyConnections, deadline);
    return refused(ResourceExhausted(
        transport::auth::RefusalText(uint16_t(transport::auth::Refusal::kTooManyConnections))));
  }
  // Sockets come later, one per channel the peer opens on this engine.
  auto connection = transport_.EstablishAccepting(
      std::move(owned), peer, *hello, accept_, kAcceptHandshakeTimeout,
      auth->has_value() ? &**auth : nullptr, std::move(slot).value());
  if (!connection.ok() && !stop_.load()) {
    bx::Log(LogLevel::kWarning,
            "bx rdma: handshake with " + peer + " failed: " + connection.status().ToString());
  }
}

}  // namespace bx::rdma
