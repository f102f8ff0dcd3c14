// The two cases where the library's messages do not depend on the program's log sink (log.h):
// a process about to abort says why, and a line the user asked for with an environment switch
// (BX_DEBUG=1) is seen without a sink. log.cc is the one place that writes to stderr.
#pragma once

#include <string_view>

#include "bx/log.h"

namespace bx {

// Sends `message` to the sink at kError, writes it to stderr, and aborts: for misuse that
// leaves no way to go on (a foreign pointer freed into bemalloc, a metric registered twice
// with different types).
[[noreturn]] void FatalError(std::string_view message);

// Sends `message` to the sink, or to stderr when the program has none.
void LogRequested(LogLevel level, std::string_view message);

}  // namespace bx
