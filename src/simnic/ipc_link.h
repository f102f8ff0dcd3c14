// Links between simnic fabrics in different processes on one host.
//
// Each process listens on the abstract unix socket "@bxsim.<pid>"; a device's GID carries its
// pid, so a QP's destination GID says where to connect. A process sends everything it has for
// another (requests as requester, replies as responder) on its own outgoing connection to that
// process; incoming connections are only read, by one reader thread per process, which queues
// whole frames for the hardware thread. Stream sockets keep frames in order, as RC needs.
//
// Why sockets, not shared memory with process_vm_writev: a socket pair needs no shared memory
// naming or cleanup, preserves order for free, and detects peer death (EOF) at once; the payload
// costs one extra copy through the kernel, which lands on the simnic's threads, not the host's.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/thread_cpu_clock.h"
#include "simnic/ipc_frame.h"

namespace bx::simnic {

class IpcLink {
 public:
  // Starts listening and the reader thread; `wake` is called after frames are queued.
  IpcLink(uint32_t pid, std::function<void()> wake);
  ~IpcLink();
  IpcLink(const IpcLink&) = delete;
  IpcLink& operator=(const IpcLink&) = delete;

  // Hardware thread: sends one frame to process `pid`. False when the peer cannot be reached.
  bool Send(uint32_t pid, const IpcHeader& header, const iovec* payload, int payload_count);

  // Hardware thread: takes the queued frames and the pids whose connections closed.
  void Drain(std::vector<IpcFrame>* frames, std::vector<uint32_t>* lost_peers);
  bool HasInbound() const;
  // Has the reader take in what the incoming connections hold now, so that Drain() then returns
  // every frame that had arrived when this was called. Waits for the reader (at most a second).
  // Why: a frame a peer wrote before it spoke to this process by another way (its application
  // saw the data and disconnected through a connection manager) must not lose the race to it.
  void Settle();

  // CPU time of the reader thread, nanoseconds.
  uint64_t ThreadCpuNs() const { return reader_cpu_clock_.Ns(); }

 private:
  void ReadLoop();
  // Reads what connection `fd` has (without waiting for the rest of a frame) into its parser.
  void ReadFrom(int fd, IpcFrameParser& parser);
  // Reader thread: queues `frames` and a lost peer (0: none) for the hardware thread, and wakes
  // it when there is anything.
  void Deliver(std::vector<IpcFrame>& frames, uint32_t lost);
  int ConnectTo(uint32_t pid);
  // Hardware thread: closes the outgoing connection to `pid`.
  void CloseOutgoing(uint32_t pid, int fd);
  // Reader thread: an outgoing connection the peer closed (EPOLLRDHUP): the peer is lost.
  void OutgoingClosed(int fd);
  // A connection from another user: closed; the first is logged, all are counted.
  void RefusePeer(pid_t pid, uid_t uid);

  uint32_t pid_;
  const IpcCookie cookie_;  // BX_SIM_FABRIC_COOKIE: sent first on every connection, and expected
  std::string path_;        // the socket file with BX_SIM_FABRIC_DIR (removed at exit), else empty
  std::function<void()> wake_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  std::thread reader_;
  ThreadCpuClock reader_cpu_clock_;

  std::unordered_map<uint32_t, int> outgoing_;  // hardware thread only
  std::mutex watch_mu_;
  std::unordered_map<int, uint32_t> outgoing_watch_;  // fd -> pid, for the reader (watch_mu_)
  // Reader thread only: each incoming connection's framing (its peer's pid inside).
  std::unordered_map<int, IpcFrameParser> incoming_;
  // Settle(): a request rings settle_fd_ (an eventfd the reader polls); the reader reads every
  // incoming connection and reports the requests it has served in settle_served_.
  void ServeSettle();
  int settle_fd_ = -1;
  std::mutex settle_mu_;
  std::condition_variable settle_cv_;
  uint64_t settle_asked_ = 0;   // (settle_mu_)
  uint64_t settle_served_ = 0;  // (settle_mu_)

  mutable std::mutex inbound_mu_;
  std::deque<IpcFrame> inbound_;
  std::vector<uint32_t> lost_;
  std::atomic<bool> has_inbound_{false};
  std::atomic<uint64_t> refused_peers_{0};
};

}  // namespace bx::simnic
