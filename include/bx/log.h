// Where the library's messages go: RPC connection state changes, refused peers, failover
// decisions, device limitations. By default nowhere: the library never writes to stderr by itself
// (only a process about to abort says why there). A program chooses:
//
//   bx::SetLogSink(bx::StderrLogSink());  // each message on its own line, as `bx` prints them
//   bx::SetLogSink([](bx::LogLevel level, std::string_view message) { MyLog(level, message); });
//
// Threads: SetLogSink from any thread, at any time; the sink is called from any thread (I/O
// threads among them), one message at a time per call, and must not block or call back into
// bexpress (but for Log, and SetLogSink to replace itself).
#pragma once

#include <functional>
#include <string_view>

#include "bx/export.h"

namespace bx {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Replaces the sink; an empty one discards every message. Returns once no other thread is still
// in the old sink, so what it captured may be destroyed then (called from within a sink, it
// returns at once).
BX_EXPORT void SetLogSink(LogSink sink);
// Writes messages at `min_level` and above to stderr, one line each.
BX_EXPORT LogSink StderrLogSink(LogLevel min_level = LogLevel::kDebug);
BX_EXPORT std::string_view LogLevelName(LogLevel level);

// Sends `message` to the sink (for the library's own layers, and for programs that want their
// lines to go where bexpress's go).
BX_EXPORT void Log(LogLevel level, std::string_view message);

}  // namespace bx
