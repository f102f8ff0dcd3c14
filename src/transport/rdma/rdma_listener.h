// RdmaListener: an rdma:// listener. Accepts bootstrap connections on its own thread, waits
// for each one's Hello there without blocking (PendingHellos), then runs the rest of its
// handshake on a thread of its own (HandshakePool), so a slow or silent client stalls neither an
// I/O thread, nor the accept loop, nor another client's handshake. Kept apart from the
// transport because admitting strangers is its own concern: bounds, refusals, eviction.
//
// Threads: Close from any thread but the accept loop and a handshake's own.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bx/transport.h"
#include "transport/rdma/handshake_pool.h"
#include "transport/rdma/pending_hellos.h"
#include "transport/rdma/rdma_connection.h"
#include "transport/refusal_log.h"
#include "transport/socket_util.h"

namespace bx::rdma {

class RdmaTransportImpl;

class RdmaListener : public Listener {
 public:
  // Starts accepting on `socket` (blocking, listening) at once.
  RdmaListener(RdmaTransportImpl& transport, transport::ListeningSocket socket,
               AcceptHandler on_accept);
  ~RdmaListener() override { Close(); }

  std::string url() const override { return socket_.url.ToString(); }
  void Close() override;

 private:
  void AcceptLoop();
  void AcceptOne(std::vector<PendingHellos::Dropped>& dropped);
  void StartHandshake(PendingHellos::Arrived arrived);
  // Counts a refused peer and says so on stderr (rate-limited).
  void Refused(const std::string& peer, const Status& why);
  // On the connection's handshake thread: from the peer's Hello to an active connection.
  void Admit(int fd, const PendingHellos::Arrived& arrived, const std::atomic<bool>& evicted);

  RdmaTransportImpl& transport_;
  transport::ListeningSocket socket_;
  std::shared_ptr<AcceptState> accept_;
  const size_t budget_;   // descriptors for unauthenticated connections
  PendingHellos hellos_;  // the accept thread's
  HandshakePool handshakes_;
  std::atomic<bool> stop_{false};
  transport::RefusalLog refusals_{"bx rdma"};
  std::thread thread_;
};

}  // namespace bx::rdma
