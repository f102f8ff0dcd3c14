// bx_transport_test's main: bemalloc must exist before any transport receives a message.
#include <gtest/gtest.h>

#include "transport/tests/transports_under_test.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  bx::transport::testing::InitTestMemoryPool();
  return RUN_ALL_TESTS();
}
