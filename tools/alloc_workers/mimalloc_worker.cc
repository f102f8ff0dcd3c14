// mimalloc through its own prefixed API.
#include <mimalloc.h>

#include "workload.h"

namespace {
void* Allocate(size_t size) {
  return mi_malloc(size);
}
void Deallocate(void* p) {
  mi_free(p);
}
}  // namespace

int main(int argc, char** argv) {
  return bx::alloc_bench::WorkerMain(argc, argv, {"mimalloc", &Allocate, &Deallocate, {}, {}});
}
