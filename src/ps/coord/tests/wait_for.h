// Condition waits shared by the coordination tests: they poll, because what they wait for (a
// lease expiring in etcd, a watch firing) has no notification the test could block on.
#pragma once

#include <chrono>
#include <thread>

namespace bx::ps::coord_test {

// Polls `done` every 10 ms until it holds or `limit` passes; whether it held.
template <typename F>
bool WaitFor(F done, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace bx::ps::coord_test
