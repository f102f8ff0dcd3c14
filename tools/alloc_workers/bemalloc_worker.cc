// bemalloc over the simnic (BX_VERBS=sim unless set), so registration is real work. With
// --footprint, runs the footprint-over-time workload instead (footprint.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "alloc/verbs_registrar.h"
#include "bx/bemalloc.h"
#include "footprint.h"
#include "verbs/verbs.h"
#include "workload.h"

int main(int argc, char** argv) {
  setenv("BX_VERBS", "sim", /*overwrite=*/0);
  bx::Result<bx::verbs::Device> device = bx::verbs::Device::Open();
  if (!device.ok()) {
    std::fprintf(stderr, "bemalloc worker: %s\n", device.status().ToString().c_str());
    return 1;
  }
  // Kept until exit: bemalloc registers through it for the life of the process.
  auto* kept = new bx::verbs::Device(std::move(device).value());
  if (bx::Status s = bx::bemalloc::Init(*kept); !s.ok()) {
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
