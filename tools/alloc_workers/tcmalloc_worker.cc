// gperftools tcmalloc (tcmalloc_minimal) as the process's malloc.
#include <cstdlib>

#include "workload.h"

int main(int argc, char** argv) {
  return bx::alloc_bench::WorkerMain(argc, argv, {"tcmalloc", &std::malloc, &std::free, {}, {}});
}
