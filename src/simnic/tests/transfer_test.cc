// Data movement: SEND/RECV ordering, WRITE, READ and WRITE_WITH_IMM integrity from 1 byte to
// 64 MB, scatter/gather lists, inline sends, and receive-buffer length errors.
#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "base/sanitizer_build.h"
#include "simnic_fixture.h"

namespace bx::simnic::testing {
namespace {

using TransferTest = SimPairTest;

TEST_F(TransferTest, SendRecvKeepsOrderAndContent) {
  Connect();
  constexpr int kMessages = 2000;
  constexpr size_t kSlot = 512;
  auto send_buf = Register(a_.pd, kSlot * kMessages);
  auto recv_buf = Register(b_.pd, kSlot * kMessages);
  std::mt19937 rng(7);
  std::vector<uint32_t> sizes(kMessages);
  for (auto& n : sizes) n = 1 + rng() % kSlot;
  for (int i = 0; i < kMessages; ++i)
    FillRandom(send_buf->data() + size_t(i) * kSlot, sizes[size_t(i)], uint64_t(i));
  int posted_recv = 0, sent = 0, received = 0, send_done = 0;
  while (received < kMessages) {
    // Receives stay ahead of sends: this test is about order, not receiver-not-ready.
    while (posted_recv < kMessages && posted_recv - received < 60) {
      ibv_sge s{recv_buf->addr() + uint64_t(posted_recv) * kSlot, uint32_t(kSlot),
                recv_buf->mr->lkey};
      ASSERT_EQ(PostRecv(b_.qp, uint64_t(posted_recv), &s, 1), 0);
      ++posted_recv;
    }
    while (sent < posted_recv && sent - send_done < 60) {
      ibv_sge s{send_buf->addr() + uint64_t(sent) * kSlot, sizes[size_t(sent)], send_buf->mr->lkey};
      ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, uint64_t(sent), &s, 1, IBV_SEND_SIGNALED), 0);
      ++sent;
    }
    for (const ibv_wc& wc : Drain(a_.send_cq, std::chrono::milliseconds(0))) {
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
      ++send_done;
    }
    auto wcs = PollN(b_.recv_cq, 1);
    ASSERT_EQ(wcs.size(), 1u) << "receive " << received << " never completed";
    const ibv_wc& wc = wcs[0];
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(wc.opcode, IBV_WC_RECV);
    ASSERT_EQ(wc.wr_id, uint64_t(received)) << "receives complete in posting order";
    ASSERT_EQ(wc.byte_len, sizes[size_t(received)]);
    ASSERT_EQ(wc.qp_num, b_.qp->qp_num);
    ASSERT_EQ(wc.src_qp, a_.qp->qp_num);
    ASSERT_EQ(0, std::memcmp(send_buf->data() + size_t(received) * kSlot,
                             recv_buf->data() + size_t(received) * kSlot, wc.byte_len))
        << "message " << received << " arrived intact";
    ++received;
  }
  auto rest = PollN(a_.send_cq, size_t(sent - send_done));
  EXPECT_EQ(rest.size(), size_t(sent - send_done));
}

// Sizes from 1 byte to 64 MB, including odd ones, each written, read back and compared.
TEST_F(TransferTest, WriteThenReadRandomSizesUpTo64MB) {
  Connect();
  constexpr size_t kMax = 64u << 20;
  auto local = Register(a_.pd, kMax);
  auto back = Register(a_.pd, kMax);
  auto remote = Register(b_.pd, kMax);
  std::mt19937_64 rng(11);
  std::vector<size_t> sizes = {1, 2, 63, 4096, 4097, 65535, 1 << 20, kMax};
  for (int i = 0; i < 6; ++i) sizes.push_back(1 + rng() % (8u << 20));
  for (size_t n : sizes) {
    size_t offset = rng() % 64;
    n = std::min(n, kMax - offset);
    FillRandom(local->data(), n, n);
    ibv_sge s{local->addr(), uint32_t(n), local->mr->lkey};
    ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED,
                       remote->addr() + offset, remote->mr->rkey),
              0);
    auto w = PollN(a_.send_cq, 1);
    ASSERT_EQ(w.size(), 1u);
    ASSERT_EQ(w[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(w[0].status);
    ASSERT_EQ(w[0].opcode, IBV_WC_RDMA_WRITE);
    ASSERT_EQ(0, std::memcmp(local->data(), remote->data() + offset, n)) << "write of " << n;

    std::memset(back->data(), 0, n);
    ibv_sge r{back->addr(), uint32_t(n), back->mr->lkey};
    ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_READ, 2, &r, 1, IBV_SEND_SIGNALED,
                       remote->addr() + offset, remote->mr->rkey),
              0);
    w = PollN(a_.send_cq, 1);
    ASSERT_EQ(w.size(), 1u);
    ASSERT_EQ(w[0].status, IBV_WC_SUCCESS);
    ASSERT_EQ(w[0].opcode, IBV_WC_RDMA_READ);
    ASSERT_EQ(w[0].byte_len, n);
    ASSERT_EQ(0, std::memcmp(local->data(), back->data(), n)) << "read of " << n;
  }
  // Writes consume no receive: the responder's receive queue was never touched.
  EXPECT_TRUE(Drain(b_.recv_cq).empty());
}

// A program that spins on the last byte of its buffer (ib_write_lat, low-latency protocols) must
// find every earlier byte in place once that byte has arrived, as a NIC places a message in
// increasing address order. Each write is compared in full the moment its last byte lands,
// before its completion is polled; two sources that differ in every byte alternate, so any byte
// still from the write before shows. Returns how many writes were torn (it stops at 5).
int CountTornWrites(Endpoint& a, Endpoint& b, size_t min, size_t max, int writes) {
  auto even = Register(a.pd, max);
  auto odd = Register(a.pd, max);
  auto target = Register(b.pd, max);
  // A random block of prime length repeated (filling 64 MB byte by byte is slow under TSan).
  std::vector<uint8_t> block(4093), inverted(block.size());
  FillRandom(block.data(), block.size(), 3);
  for (size_t i = 0; i < block.size(); ++i) inverted[i] = uint8_t(~block[i]);
  for (size_t at = 0; at < max; at += block.size()) {
    size_t n = std::min(block.size(), max - at);
    std::memcpy(even->data() + at, block.data(), n);
    std::memcpy(odd->data() + at, inverted.data(), n);
  }
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> log_size(std::log(double(min)), std::log(double(max)));
  int torn = 0;
  for (int w = 0; w < writes && torn < 5; ++w) {
    const size_t n = std::clamp(size_t(std::exp(log_size(rng))), min, max);
    Region& source = (w % 2 == 0) ? *even : *odd;
    uint8_t* last = target->data() + n - 1;
    const uint8_t expected = source.data()[n - 1];
    std::atomic_ref<uint8_t>(*last).store(uint8_t(~expected), std::memory_order_relaxed);
    ibv_sge s{source.addr(), uint32_t(n), source.mr->lkey};
    EXPECT_EQ(PostSend(a.qp, IBV_WR_RDMA_WRITE, uint64_t(w), &s, 1, IBV_SEND_SIGNALED,
                       target->addr(), target->mr->rkey),
              0);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    // Spin hot at first, so as to be looking when the data lands; then yield between looks,
    // so that the simnic's hardware thread gets a core on a busy host.
    for (int spins = 0; std::atomic_ref<uint8_t>(*last).load(std::memory_order_acquire) != expected;
         ++spins) {
      if (spins < 100000) continue;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "write " << w << " never landed";
        return torn + 1;
      }
      std::this_thread::yield();
    }
    if (std::memcmp(target->data(), source.data(), n) != 0) {
      size_t first = 0;
      while (first < n && target->data()[first] == source.data()[first]) ++first;
      ADD_FAILURE() << "write " << w << " of " << n << " bytes: last byte in place before byte "
                    << (first < n ? std::to_string(first) : "(settled while compared)");
      ++torn;
    }
    auto wc = PollN(a.send_cq, 1);
    EXPECT_EQ(wc.size(), 1u);
    if (wc.size() == 1) {
      EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    }
  }
  return torn;
}

// 1,000 writes of 1-64 MB (log-uniform). Under TSan, whose memcpy and memcmp check every byte,
// 30 of 64 KB-4 MB: a tail not stored last with release ordering races with the poller's reads
// at any size over one 4 KB packet, and TSan reports it. (This chose by __SANITIZE_THREAD__,
// which clang 14 does not define: CI's TSan pass ran all 1,000.)
TEST_F(TransferTest, PollingTheLastByteNeverSeesATornLargeWrite) {
  Connect();
  if constexpr (kThreadSanitizerBuild) {
    EXPECT_EQ(CountTornWrites(a_, b_, 64u << 10, 4u << 20, 30), 0);
  } else {
    EXPECT_EQ(CountTornWrites(a_, b_, 1u << 20, 64u << 20, 1000), 0);
  }
}

// 20,000 writes of 300 B - 2 KB: one memcpy of these sizes (glibc's 4-vector loop) stores the
// first 32 bytes after the last ones, which a poller caught every few thousand writes with the
// host busy (every few hundred when idle).
TEST_F(TransferTest, PollingTheLastByteNeverSeesATornSmallWrite) {
  Connect();
  EXPECT_EQ(CountTornWrites(a_, b_, 300, 2000, 20000), 0);
}

TEST_F(TransferTest, WriteWithImmConsumesAReceiveAndCarriesImmediate) {
  Connect();
  auto local = Register(a_.pd, 1 << 20);
  auto remote = Register(b_.pd, 1 << 20);
  ASSERT_EQ(PostRecv(b_.qp, 77, nullptr, 0), 0);  // WRITE_WITH_IMM needs no receive SGEs
  FillRandom(local->data(), 300000, 5);
  ibv_sge s{local->addr(), 300000, local->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE_WITH_IMM, 1, &s, 1, IBV_SEND_SIGNALED,
                     remote->addr() + 100, remote->mr->rkey, htonl(0xabcdef01)),
            0);
  auto r = PollN(b_.recv_cq, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(r[0].wr_id, 77u);
  EXPECT_EQ(r[0].byte_len, 300000u);
  EXPECT_TRUE(r[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(r[0].imm_data), 0xabcdef01u);
  // Completion semantics: once the receive completion is seen, the payload is in memory.
  EXPECT_EQ(0, std::memcmp(local->data(), remote->data() + 100, 300000));
  auto s_wc = PollN(a_.send_cq, 1);
  ASSERT_EQ(s_wc.size(), 1u);
  EXPECT_EQ(s_wc[0].status, IBV_WC_SUCCESS);
}

TEST_F(TransferTest, ScatterGatherListsOnBothSides) {
  Connect();
  auto src = Register(a_.pd, 4096);
  auto dst = Register(b_.pd, 4096);
  FillRandom(src->data(), 4096, 3);
  ibv_sge send_sges[3] = {{src->addr(), 100, src->mr->lkey},
                          {src->addr() + 1000, 200, src->mr->lkey},
                          {src->addr() + 3000, 50, src->mr->lkey}};
  ibv_sge recv_sges[2] = {{dst->addr(), 120, dst->mr->lkey},
                          {dst->addr() + 2000, 1000, dst->mr->lkey}};
  ASSERT_EQ(PostRecv(b_.qp, 1, recv_sges, 2), 0);
  ASSERT_EQ(
      PostSend(a_.qp, IBV_WR_SEND_WITH_IMM, 1, send_sges, 3, IBV_SEND_SIGNALED, 0, 0, htonl(9)), 0);
  auto r = PollN(b_.recv_cq, 1);
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].byte_len, 350u);
  EXPECT_EQ(ntohl(r[0].imm_data), 9u);
  std::vector<uint8_t> gathered;
  gathered.insert(gathered.end(), src->data(), src->data() + 100);
  gathered.insert(gathered.end(), src->data() + 1000, src->data() + 1200);
  gathered.insert(gathered.end(), src->data() + 3000, src->data() + 3050);
  EXPECT_EQ(0, std::memcmp(gathered.data(), dst->data(), 120));
  EXPECT_EQ(0, std::memcmp(gathered.data() + 120, dst->data() + 2000, 230));
}

TEST_F(TransferTest, InlineSendCopiesAtPostTime) {
  Connect();
  auto dst = Register(b_.pd, 256);
  uint8_t unregistered[48];  // inline data needs no memory region
  std::memset(unregistered, 0x5a, sizeof(unregistered));
  ibv_sge r{dst->addr(), 256, dst->mr->lkey};
  ASSERT_EQ(PostRecv(b_.qp, 1, &r, 1), 0);
  ibv_sge s{reinterpret_cast<uint64_t>(unregistered), sizeof(unregistered), 0};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, 1, &s, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE), 0);
  std::memset(unregistered, 0, sizeof(unregistered));  // reuse at once, as inline allows
  auto wc = PollN(b_.recv_cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(wc[0].byte_len, sizeof(unregistered));
  for (size_t i = 0; i < sizeof(unregistered); ++i) ASSERT_EQ(dst->data()[i], 0x5a);

  // Beyond max_inline_data the post itself fails.
  uint8_t big[128] = {};
  ibv_sge b{reinterpret_cast<uint64_t>(big), sizeof(big), 0};
  EXPECT_EQ(PostSend(a_.qp, IBV_WR_SEND, 2, &b, 1, IBV_SEND_INLINE), EINVAL);
}

TEST_F(TransferTest, SendLargerThanReceiveBufferFailsBothSides) {
  Connect();
  auto src = Register(a_.pd, 1024);
  auto dst = Register(b_.pd, 1024);
  ibv_sge r{dst->addr(), 100, dst->mr->lkey};
  ASSERT_EQ(PostRecv(b_.qp, 1, &r, 1), 0);
  ASSERT_EQ(PostRecv(b_.qp, 2, &r, 1), 0);
  ibv_sge s{src->addr(), 101, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, 1, &s, 1, IBV_SEND_SIGNALED), 0);
  auto rw = PollN(b_.recv_cq, 2);
  ASSERT_EQ(rw.size(), 2u);
  EXPECT_EQ(rw[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(rw[1].status, IBV_WC_WR_FLUSH_ERR);
  auto sw = PollN(a_.send_cq, 1);
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].status, IBV_WC_REM_INV_REQ_ERR);
}

TEST_F(TransferTest, ZeroLengthSendCompletes) {
  Connect();
  ASSERT_EQ(PostRecv(b_.qp, 5, nullptr, 0), 0);
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_SEND, 1, nullptr, 0, IBV_SEND_SIGNALED), 0);
  auto rw = PollN(b_.recv_cq, 1);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw[0].byte_len, 0u);
}

}  // namespace
}  // namespace bx::simnic::testing
