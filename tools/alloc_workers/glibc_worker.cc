// glibc malloc, in a process that links no other allocator.
#include <cstdlib>

#include "workload.h"

int main(int argc, char** argv) {
  return bx::alloc_bench::WorkerMain(argc, argv, {"glibc", &std::malloc, &std::free, {}, {}});
}
