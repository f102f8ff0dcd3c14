// The start-up every test program below src/library shares (bx::Init lives above them): the
// software NIC unless BX_VERBS says otherwise, the device BX_DEVICE names (else bxsim0), opened
// once and kept until exit (bemalloc's regions stay registered with it), and bemalloc on it.
#pragma once

#include "bx/bemalloc.h"
#include "verbs/verbs.h"

namespace bx::test_support {

// Sets up the process as above, the first time; later calls return the same device (and ignore
// `options`). Exits the process, saying why, when the device or bemalloc cannot be set up: no
// test could run.
verbs::Device& InitTestMemory(const bemalloc::Options& options = {});

}  // namespace bx::test_support
