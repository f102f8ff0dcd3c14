// Fuzzes what an RDMA listener does with the first bytes a client sends: ReceiveHello (the read
// loop and DecodeHello) and then ReceiveReady, over a real socket pair, as the accept thread
// runs them. The input is everything the "client" sends before closing its end.
//
// Properties checked beyond "no crash, leak or sanitizer report":
//   - an accepted Hello has every field inside the bounds bootstrap.h promises;
//   - encoding an accepted Hello and decoding it again gives the same Hello.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "transport/rdma/bootstrap.h"

namespace {

// Bigger inputs than this say nothing new (the reader stops after 65 bytes) and could fill the
// socket buffer, which would block the single-threaded writer below.
constexpr size_t kMaxInput = 4096;
constexpr auto kTimeout = std::chrono::milliseconds(1000);

void Check(bool condition) {
  if (!condition) std::abort();
}

bool SameHello(const bx::rdma::Hello& a, const bx::rdma::Hello& b) {
  return a.qp_num == b.qp_num && std::memcmp(a.gid.raw, b.gid.raw, 16) == 0 &&
         a.recv_queue_depth == b.recv_queue_depth && a.eager_limit == b.eager_limit &&
         a.max_message_bytes == b.max_message_bytes && a.psn == b.psn && a.auth == b.auth &&
         a.lid == b.lid && a.link_layer == b.link_layer && a.mtu == b.mtu;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInput) return -1;  // not added to the corpus
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  if (size > 0 && write(fds[1], data, size) != ssize_t(size)) std::abort();
  shutdown(fds[1], SHUT_WR);  // the peer closes after its bytes: reads end with EOF, never wait

  auto hello = bx::rdma::ReceiveHello(fds[0], kTimeout);
  if (hello.ok()) {
    const bx::rdma::Hello& h = *hello;
    Check(h.qp_num != 0 && h.qp_num <= 0xffffff);
    Check(h.psn <= 0xffffff);
    Check(h.recv_queue_depth >= 2 && h.recv_queue_depth <= bx::rdma::kMaxRecvQueueDepth);
    Check(h.eager_limit >= bx::rdma::kMinEagerLimit && h.eager_limit <= bx::rdma::kMaxEagerLimit);
    Check(h.max_message_bytes > 0);
    uint8_t again[64];
    bx::rdma::EncodeHello(h, again);
    auto decoded = bx::rdma::DecodeHello(again);
    Check(decoded.ok() && SameHello(*decoded, h));
    (void)bx::rdma::ReceiveReady(fds[0], kTimeout);
  } else {
    Check(!hello.status().message().empty());  // a refusal always says why
  }
  close(fds[0]);
  close(fds[1]);
  return 0;
}
