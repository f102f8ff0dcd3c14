// bx_rpc_test's main: bemalloc on the simnic and both transports exist before any test runs.
#include <gtest/gtest.h>

#include "rpc/tests/rpc_test_util.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  bx::rpc::testing::InitProcess();
  return RUN_ALL_TESTS();
}
