#include "alloc/tests/test_backend.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "alloc/testing/test_memory.h"
#include "alloc/verbs_registrar.h"
#include "bx/bemalloc.h"
#include "verbs/verbs.h"

namespace bx::bemalloc::testing {
namespace {

std::string g_backend_name;
verbs::Device* g_device = nullptr;

[[noreturn]] void Fail(const Status& status) {
  std::fprintf(stderr, "bx_alloc_test: cannot initialise bemalloc: %s\n",
               status.ToString().c_str());
  std::exit(1);
}

}  // namespace

void InitTestPool() {
  // Small regions and a small empty-region reserve make growth and release visible with little
  // memory; decay stays jemalloc's (10 s), longer than any test, so only Trim() releases.
  Options options;
  options.min_region_bytes = size_t{4} << 20;
  options.keep_empty_bytes = size_t{16} << 20;
  g_device = &test_support::InitTestMemory(options);
  if (g_device->lib().sim().is_registered == nullptr) {
    Fail(FailedPrecondition("the verbs library is not the simnic (no bxsim_is_registered)"));
  }
  g_backend_name = "simnic";
}

const std::string& BackendName() {
  return g_backend_name;
}

bool NicHasRegistered(const void* p, size_t n) {
  return g_device->lib().sim().is_registered(g_device->pd(), p, n, kRegionAccess) == 1;
}

}  // namespace bx::bemalloc::testing
