#include <gtest/gtest.h>

#include <cstdio>

#include "alloc/tests/test_backend.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  bx::bemalloc::testing::InitTestPool();
  std::printf("bemalloc registers through: %s\n", bx::bemalloc::testing::BackendName().c_str());
  return RUN_ALL_TESTS();
}
