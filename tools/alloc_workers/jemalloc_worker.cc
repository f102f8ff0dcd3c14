// jemalloc as the process's malloc (Debian's build is unprefixed), default arena, default
// options: what an application gets by linking it.
#include <cstdlib>

#include "workload.h"

int main(int argc, char** argv) {
  return bx::alloc_bench::WorkerMain(argc, argv, {"jemalloc", &std::malloc, &std::free, {}, {}});
}
