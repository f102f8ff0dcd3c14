#include "base/thread_sched_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>

namespace bx {

ThreadSchedStat::~ThreadSchedStat() {
  const int fd = fd_.exchange(-1);
  if (fd >= 0) close(fd);
}

bool ThreadSchedStat::CaptureCurrentThread() {
  // thread-self is resolved at open: the descriptor keeps naming this thread wherever it is read.
  const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const int old = fd_.exchange(fd);
  if (old >= 0) close(old);
  return true;
}

ThreadSchedStat::Sample ThreadSchedStat::Read() const {
  Sample sample;
  const int fd = fd_.load(std::memory_order_acquire);
  if (fd < 0) return sample;
  // "<ns on a CPU> <ns waiting runnable> <turns on a CPU>\n"
  char text[96];
  const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return sample;
  const char* const end = text + n;
  uint64_t fields[3] = {0, 0, 0};
  const char* p = text;
  for (uint64_t& field : fields) {
    while (p < end && *p == ' ') ++p;
    p = std::from_chars(p, end, field).ptr;
  }
  sample.waited_ns = fields[1];
  sample.turns = fields[2];
  return sample;
}

}  // namespace bx
