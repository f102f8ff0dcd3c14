#include "bx/log.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "base/dcheck.h"
#include "base/log_internal.h"

namespace bx {
namespace {

std::mutex g_mu;
std::condition_variable g_sink_released;  // a Log call let go of its sink
std::shared_ptr<const LogSink> g_sink;    // guarded by g_mu; null: discard
thread_local int t_sinks_held = 0;        // sink copies this thread's Log calls hold

}  // namespace

void SetLogSink(LogSink sink) {
  auto next = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  std::unique_lock lock(g_mu);
  std::shared_ptr<const LogSink> old = std::exchange(g_sink, std::move(next));
  // Wait until no other thread runs the old sink, so that its caller may destroy what it
  // captured. A sink that replaces itself cannot wait for itself: it goes on at once.
  if (!old || t_sinks_held > 0) return;
  g_sink_released.wait(lock, [&] { return old.use_count() == 1; });
}

LogSink StderrLogSink(LogLevel min_level) {
  return [min_level](LogLevel level, std::string_view message) {
    if (level < min_level) return;
    std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
  };
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

void Log(LogLevel level, std::string_view message) {
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard lock(g_mu);
    sink = g_sink;
  }
  if (!sink) return;
  // Lets go of the sink under the lock, where SetLogSink reads its count, even if it throws.
  struct Release {
    std::shared_ptr<const LogSink>& sink;
    ~Release() {
      --t_sinks_held;
      {
        std::lock_guard lock(g_mu);
        sink.reset();
      }
      g_sink_released.notify_all();
    }
  } release{sink};
  ++t_sinks_held;
  // Called outside the lock: a sink may take its time, or log from another thread.
  (*sink)(level, message);
}

void FatalError(std::string_view message) {
  Log(LogLevel::kError, message);
  std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
  std::abort();
}

namespace internal {

void DcheckFailed(const char* condition, const char* file, int line) {
  FatalError(std::string("check failed: ") + condition + " (" + file + ":" + std::to_string(line) +
             ")");
}

}  // namespace internal

void LogRequested(LogLevel level, std::string_view message) {
  bool has_sink;
  {
    std::lock_guard lock(g_mu);
    has_sink = g_sink != nullptr;
  }
  if (has_sink) return Log(level, message);
  std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
}

}  // namespace bx
