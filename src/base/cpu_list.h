// CPU lists as Linux prints them ("0-3,8,10-11"): operators who reserve cores for communication
// name them in BX_IO_CPUS, and every transport of the process pins its I/O threads to them.
#pragma once

#include <pthread.h>

#include <string_view>
#include <vector>

#include "bx/status.h"

namespace bx {

// The CPUs `text` names, in order, each once. InvalidArgument for anything else: an empty list,
// a range that runs backwards, a number out of 0..4095.
Result<std::vector<int>> ParseCpuList(std::string_view text);

// `cpus` when BX_IO_CPUS is unset or empty, else the list it names. Either way every CPU must be
// one this process may run on (sched_getaffinity): a pin that cannot be kept is refused here,
// naming the CPU, rather than failing later on an I/O thread.
Result<std::vector<int>> IoCpusFromEnvironment(std::vector<int> cpus);

// Pins `thread` to `cpu`.
Status PinThread(pthread_t thread, int cpu);

}  // namespace bx
