// What the RPC tests share: the process's bemalloc pool on the simnic, fault injection on its
// device, a test service whose handlers count executions, and small helpers.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "bx/rpc.h"

namespace bx::rpc::testing {

// Opens bxsim0, initialises bemalloc on it and registers the tcp and rdma transports. Exits the
// process when that fails. Call once, from main.
void InitProcess();

// Fault injection on this process's simnic device (the one every in-process rdma socket uses).
// The simnic extension API is reached through the verbs loader, as include/bx/simnic.h says.
void VanishDevice();          // every QP to error without telling peers, link down
void SetDeviceLink(bool up);  // link up/down

// Polls `done` every 5 ms until it holds or `timeout` passes; its last answer.
bool WaitFor(const std::function<bool()>& done,
             std::chrono::milliseconds timeout = std::chrono::seconds(5));

// A gate handlers can wait on (a call held "mid-call" until the test opens it).
class Gate {
 public:
  void Wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return open_; });
  }
  void Open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = false;
};

// The methods every test server offers:
//   echo         returns the request
//   where        returns the transport the request came over ("rdma" or "tcp")
//   count        counts an execution, returns the count (not idempotent by nature)
//   executions   returns how many times count and hold ran
//   sleep        sleeps the milliseconds given as decimal text, then answers "slept"
//   hold         counts an execution; the first one waits on `gate`; answers the transport
//   fail         answers InvalidArgument("asked to fail")
struct TestService {
  std::atomic<uint64_t> executions{0};
  std::atomic<uint64_t> held{0};  // hold calls that reached the gate
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  Status Register(Server& server);
};

// A server on rdma and tcp (or just one, when `schemes` says so) on 127.0.0.1.
struct TestServer {
  std::unique_ptr<Server> server;
  std::shared_ptr<TestService> service = std::make_shared<TestService>();
  ReplicaAddress address;
};
std::unique_ptr<TestServer> StartTestServer(int worker_threads = 2,
                                            const std::string& schemes = "rdma,tcp");

Message Text(std::string_view text);
std::string TextOf(const Result<Message>& result);

// Client options tuned for tests: short probes and RDMA retries; frequent heartbeats, with a
// timeout that a thread stalled on a loaded machine should not reach (a test that needs a silent
// peer noticed quickly sets its own heartbeat_timeout).
ClientOptions FastClientOptions();

}  // namespace bx::rpc::testing
