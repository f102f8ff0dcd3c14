// The transports the parameterised suite runs against, and what the tests share: the process's
// bemalloc pool, message patterns and small synchronisation helpers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bx/buffer.h"
#include "bx/transport.h"

namespace bx::verbs {
class Device;
}
namespace bx::rdma {
struct RdmaTransportInfo;
}

namespace bx::transport::testing {

struct TransportUnderTest {
  std::string scheme;
  std::function<Result<std::unique_ptr<Transport>>(const TransportOptions&)> create;
};
// The list in transports_under_test.cc: one line per transport.
const std::vector<TransportUnderTest>& TransportsUnderTest();
std::vector<std::string> SchemesUnderTest();
const TransportUnderTest& FindTransport(const std::string& scheme);

// Initialises bemalloc for the test binary on the simnic device (BX_DEVICE names another).
// Aborts the binary when that fails.
void InitTestMemoryPool();
// The device bemalloc registers with: an rdma:// transport under test must use this one, so that
// buffer keys are valid on its QPs.
verbs::Device* TestDevice();

// An rdma:// transport with `rdma` options and `io_threads` (a failed test expectation, and null,
// when it cannot be created), and what GetRdmaTransportInfo says of one (empty after a failed
// expectation).
std::unique_ptr<Transport> MakeRdma(const RdmaOptions& rdma = {}, int io_threads = 1);
rdma::RdmaTransportInfo InfoOf(Transport& transport);

// A message of `size` bytes whose content is determined by `seed`.
Buffer PatternMessage(size_t size, uint64_t seed);
// Whether `message` is exactly PatternMessage(size, seed).
bool HasPattern(const Buffer& message, size_t size, uint64_t seed);

// Waits until `done()` holds or `timeout` passes; true when it holds. Callers notify `changed`
// under `mutex` whenever what `done` reads changes.
class Waiter {
 public:
  template <typename Predicate>
  bool WaitFor(Predicate done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, timeout, done);
  }
  // Runs `update` under the mutex and wakes waiters.
  template <typename Update>
  void Notify(Update update) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      update();
    }
    changed.notify_all();
  }
  std::mutex mutex;
  std::condition_variable changed;
};

// A gate that handlers block on, to stall an I/O thread (a peer that stops reading).
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    open_changed_.wait(lock, [&] { return open_; });
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    open_changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable open_changed_;
  bool open_ = false;
};

}  // namespace bx::transport::testing
