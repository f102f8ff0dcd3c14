// FanOut: N sub-calls under one deadline. Each sub-call is an ordinary call whose timeout is what
// is left of the shared deadline, so each ends by it; the fan-out ends when the last one does.
#include <algorithm>
#include <mutex>

#include "bx/rpc.h"

namespace bx::rpc {

namespace {

// Shared by the sub-calls' callbacks, which may run on different threads at once.
struct FanOutState {
  std::mutex mutex;
  FanOutResult result;   // guarded by mutex
  size_t remaining = 0;  // guarded by mutex
  std::function<void(FanOutResult)> done;
};

}  // namespace

void FanOut(std::vector<SubCall> calls, std::chrono::microseconds timeout,
            std::function<void(FanOutResult)> done) {
  auto state = std::make_shared<FanOutState>();
  state->remaining = calls.size();
  state->done = std::move(done);
  state->result.results.reserve(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    state->result.results.emplace_back(Unavailable("fan-out sub-call not started"));
  }
  if (calls.empty()) {
    state->done(std::move(state->result));
    return;
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  for (size_t i = 0; i < calls.size(); ++i) {
    auto finish = [state, i](Result<Message> result) {
      std::unique_lock lock(state->mutex);
      if (!result.ok()) state->result.failed.push_back(i);
      state->result.results[i] = std::move(result);
      if (--state->remaining > 0) return;
      FanOutResult out = std::move(state->result);
      lock.unlock();
      std::sort(out.failed.begin(), out.failed.end());
      state->done(std::move(out));
    };
    SubCall& sub = calls[i];
    if (sub.client == nullptr) {
      finish(InvalidArgument("fan-out sub-call " + std::to_string(i) + " has no client"));
      continue;
    }
    CallOptions options;
    options.idempotent = sub.idempotent;
    options.timeout =
        std::max(std::chrono::microseconds(0),
                 std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()));
    sub.client->Call(sub.method, std::move(sub.request), options, std::move(finish));
  }
}

std::future<FanOutResult> FanOut(std::vector<SubCall> calls, std::chrono::microseconds timeout) {
  auto promise = std::make_shared<std::promise<FanOutResult>>();
  std::future<FanOutResult> future = promise->get_future();
  FanOut(std::move(calls), timeout,
         [promise](FanOutResult result) { promise->set_value(std::move(result)); });
  return future;
}

}  // namespace bx::rpc
