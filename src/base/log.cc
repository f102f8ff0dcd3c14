#include "bx/log.h"

#include <cstdio>
#include <memory>
#include <mutex>

namespace bx {
namespace {

std::mutex g_mu;
std::shared_ptr<const LogSink> g_sink;  // null: discard

}  // namespace

void SetLogSink(LogSink sink) {
  auto next = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  std::lock_guard lock(g_mu);
  g_sink = std::move(next);
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
  // Called outside the lock: a sink may log from another thread, or replace itself.
  if (sink) (*sink)(level, message);
}

}  // namespace bx
