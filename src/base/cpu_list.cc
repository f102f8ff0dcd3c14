#include "base/cpu_list.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>

namespace bx {
namespace {

constexpr int kMaxCpu = 4095;

Result<int> ParseCpu(std::string_view text, std::string_view list) {
  int cpu = -1;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), cpu);
  if (error != std::errc() || end != text.data() + text.size() || cpu < 0 || cpu > kMaxCpu)
    return InvalidArgument("CPU list '" + std::string(list) + "': '" + std::string(text) +
                           "' is not a CPU number (0.." + std::to_string(kMaxCpu) + ")");
  return cpu;
}

}  // namespace

Result<std::vector<int>> ParseCpuList(std::string_view text) {
  std::vector<int> cpus;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma - start);
    const size_t dash = item.find('-');
    BX_ASSIGN_OR_RETURN(int first, ParseCpu(item.substr(0, dash), text));
    int last = first;
    if (dash != std::string_view::npos) {
      BX_ASSIGN_OR_RETURN(last, ParseCpu(item.substr(dash + 1), text));
    }
    if (last < first)
      return InvalidArgument("CPU list '" + std::string(text) + "': range '" + std::string(item) +
                             "' runs backwards");
    for (int cpu = first; cpu <= last; ++cpu) {
      if (std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) cpus.push_back(cpu);
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return cpus;
}

Result<std::vector<int>> IoCpusFromEnvironment(std::vector<int> cpus) {
  const char* text = std::getenv("BX_IO_CPUS");
  if (text != nullptr && *text != '\0') {
    auto parsed = ParseCpuList(text);
    if (!parsed.ok()) return parsed.status().WithContext("BX_IO_CPUS");
    cpus = std::move(parsed).value();
  }
  if (cpus.empty()) return cpus;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
    return Status::FromErrno(errno, "sched_getaffinity");
  for (int cpu : cpus) {
    if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed))
      return InvalidArgument("I/O thread CPU " + std::to_string(cpu) +
                             " is not one this process may run on");
  }
  return cpus;
}

Status PinThread(pthread_t thread, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int rc = pthread_setaffinity_np(thread, sizeof(set), &set);
  if (rc != 0) return Status::FromErrno(rc, "pinning a thread to CPU " + std::to_string(cpu));
  return Status::Ok();
}

}  // namespace bx
