// IoThreadSet: the I/O threads an rdma transport posts its connections to, each
// polling an engine::EnginePoller.
//
// Owned threads belong to one transport and stop with it. Shared threads come from one set per
// process, device and polling settings: every transport that asks for them (RPC servers,
// clients, backups of one process) polls with the same few threads, as they share one NIC,
// instead of each bringing its own. A shared thread stops when the last transport using it goes;
// connections that outlive their transport keep the thread object (never its loop) as before.
//
// Sharing trades isolation for CPU: a callback that blocks on a shared thread stalls the sockets
// of every transport on it, not only its own.
//
// Threads: Acquire and the destructor from any thread but an I/O thread of the set.
#pragma once

#include <memory>
#include <vector>

#include "bx/status.h"
#include "engine/engine_poller.h"
#include "verbs/verbs.h"

namespace bx::rdma {

class IoThreadSet {
 public:
  // `count` threads on `device`, each created with `options` (its name gets a number); from the
  // process-wide set when `shared`.
  static Result<IoThreadSet> Acquire(verbs::Device& device, const IoThreadOptions& options,
                                     int count, bool shared);
  IoThreadSet() = default;
  IoThreadSet(IoThreadSet&& other) noexcept;
  IoThreadSet& operator=(IoThreadSet&& other) noexcept;
  ~IoThreadSet() { Release(); }

  const std::vector<std::shared_ptr<IoThread>>& threads() const { return threads_; }
  // Stops what this set alone used (every thread when owned); idempotent.
  void Release();

  struct SharedEntry;  // one process-wide set of threads and its users (io_thread_set.cc)

 private:
  std::vector<std::shared_ptr<IoThread>> threads_;
  SharedEntry* shared_ = nullptr;  // the entry this set counts in as a user, if shared
};

}  // namespace bx::rdma
