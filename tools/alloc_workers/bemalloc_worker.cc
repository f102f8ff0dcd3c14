// bemalloc over the simnic (BX_VERBS=sim unless set), so registration is real work. With
// --footprint, runs the footprint-over-time workload instead (footprint.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bx/bemalloc.h"
#include "bx/init.h"
#include "footprint.h"
#include "workload.h"

int main(int argc, char** argv) {
  setenv("BX_VERBS", "sim", /*overwrite=*/0);
  if (bx::Status s = bx::Init(); !s.ok()) {
    std::fprintf(stderr, "bemalloc worker: %s\n", s.ToString().c_str());
    return 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "--footprint") == 0) {
    return bx::alloc_bench::FootprintMain(argc - 1, argv + 1);
  }
  bx::alloc_bench::Allocator allocator{"bemalloc", &bx::bemalloc::Allocate,
                                       &bx::bemalloc::Deallocate,
                                       [] { return bx::bemalloc::GetCounters().registered_bytes; },
                                       [] { return bx::bemalloc::GetCounters().registrations; }};
  return bx::alloc_bench::WorkerMain(argc, argv, allocator);
}
