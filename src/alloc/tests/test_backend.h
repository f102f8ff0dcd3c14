// The registrar behind the process-wide bemalloc pool in bx_alloc_test: the simnic through the
// verbs loader (BX_VERBS=sim). FakeRegistrar serves the tests of a RegionPool on its own.
#pragma once

#include <cstddef>
#include <string>

namespace bx::bemalloc::testing {

// Initialises bemalloc once for the test binary; aborts the binary when that fails.
void InitTestPool();
// "simnic" or "fake".
const std::string& BackendName();
// Whether the NIC (the simnic's MR table, or the fake's) has [p, p+n) registered with bemalloc's
// access flags.
bool NicHasRegistered(const void* p, size_t n);

}  // namespace bx::bemalloc::testing
