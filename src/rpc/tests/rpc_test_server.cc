// bx_rpc_test_server: a replica in its own process, for tests that kill or freeze one. Serves the
// test service (rpc_test_util.h) on rdma:// and tcp:// at free ports, prints its replica address
// as one line on stdout, and exits when stdin reaches end of file (its parent is gone).
#include <unistd.h>

#include <cstdio>

#include "rpc/tests/rpc_test_util.h"

int main() {
  bx::rpc::testing::InitProcess();
  auto server = bx::rpc::testing::StartTestServer(/*worker_threads=*/4);
  std::printf("%s\n", server->address.ToString().c_str());
  std::fflush(stdout);
  char byte;
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  server->server->Stop();
  return 0;
}
