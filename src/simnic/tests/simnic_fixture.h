// Test fixture for the simnic conformance suite: two devices (bxsim0, bxsim1) in this process,
// a connected RC QP pair between them, and helpers to register memory and collect completions.
// The tests call libibverbs directly (linked against libbx_simnic.so): they test the device.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "bx/simnic.h"

namespace bx::simnic::testing {

struct QpOptions {
  uint32_t send_wr = 64;
  uint32_t recv_wr = 64;
  uint32_t max_inline = 64;
  uint32_t max_sge = 4;
  int sq_sig_all = 0;
  uint8_t timeout = 8;  // 4.096 us * 2^8 ~ 1 ms per transport retry
  uint8_t retry_cnt = 3;
  uint8_t rnr_retry = 0;      // any RNR fails loudly unless a test asks otherwise
  uint8_t min_rnr_timer = 1;  // 10 us
  int cqe = 1024;
  bool use_parent_domain = false;
  ibv_comp_channel* send_channel = nullptr;  // the send CQ's completion channel, if any
  // Created through ibv_create_cq_ex (standard wc_flags) and ibv_create_qp_ex with these send
  // ops (0: the legacy verbs).
  uint64_t extended_send_ops = 0;
};

struct Endpoint {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_pd* qp_pd = nullptr;  // pd, or a parent domain over it
  ibv_td* td = nullptr;
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_gid gid{};
};

// Opens the device named `name`; fails the test when it is missing.
ibv_context* OpenDevice(const char* name);

// Creates CQs and an RC QP on `ep` and moves it to INIT.
void CreateQp(Endpoint& ep, const QpOptions& o);
// Moves `ep.qp` to RTR then RTS, connected to `remote`.
void ConnectQp(Endpoint& ep, uint32_t remote_qpn, const ibv_gid& remote_gid, const QpOptions& o,
               uint32_t sq_psn = 0, uint32_t rq_psn = 0);
void DestroyEndpoint(Endpoint& ep);

// Polls until `n` completions arrived or `timeout` passed; returns what arrived.
std::vector<ibv_wc> PollN(ibv_cq* cq, size_t n,
                          std::chrono::milliseconds timeout = std::chrono::seconds(10));
// Polls for `quiet` and returns everything that arrived (to check that nothing more comes).
std::vector<ibv_wc> Drain(ibv_cq* cq,
                          std::chrono::milliseconds quiet = std::chrono::milliseconds(20));

// A buffer registered on a PD, freed with the test.
struct Region {
  std::vector<uint8_t> bytes;
  ibv_mr* mr = nullptr;
  uint8_t* data() { return bytes.data(); }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(bytes.data()); }
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() {
    if (mr) ibv_dereg_mr(mr);
  }
};
std::unique_ptr<Region> Register(ibv_pd* pd, size_t size,
                                 int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                              IBV_ACCESS_REMOTE_READ);
void FillRandom(uint8_t* p, size_t n, uint64_t seed);

// Posts one work request; returns ibv_post_send's result.
int PostSend(ibv_qp* qp, ibv_wr_opcode op, uint64_t wr_id, ibv_sge* sge, int num_sge,
             unsigned flags, uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t imm = 0);
int PostRecv(ibv_qp* qp, uint64_t wr_id, ibv_sge* sge, int num_sge);

bxsim_device_counters Counters(ibv_context* ctx);

// Two devices, a connected QP pair a <-> b.
class SimPairTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  void Connect(const QpOptions& a_opts = {}, const QpOptions& b_opts = {});

  Endpoint a_, b_;
};

}  // namespace bx::simnic::testing
