// Completion semantics: unsignalled work retired by a later signalled completion, sq_sig_all,
// completion channels with real file descriptors (and no lost wake-ups), solicited-only
// notification.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>

#include <atomic>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "simnic_fixture.h"

namespace bx::simnic::testing {
namespace {

class CompletionTest : public SimPairTest {
 protected:
  // Connects the pair with every send signalled and a's send CQ on a new completion channel.
  ibv_comp_channel* ConnectWithSendChannel() {
    ibv_comp_channel* channel = ibv_create_comp_channel(a_.ctx);
    EXPECT_NE(channel, nullptr);
    QpOptions o;
    o.sq_sig_all = 1;
    o.send_channel = channel;
    Connect(o, {});
    return channel;
  }
};

// Runs the calling thread and the simnic's hardware thread on two different CPUs while it lives.
// A race between them needs both running at once, and on a busy host the scheduler tends to
// queue the hardware thread on the poller's core, behind it. Does nothing with one CPU.
class PinApartFromHardware {
 public:
  PinApartFromHardware() {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2) return;
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
    DIR* dir = opendir("/proc/self/task");
    if (dir == nullptr) return;
    while (dirent* e = readdir(dir)) {
      std::ifstream comm_file(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string comm;
      std::getline(comm_file, comm);
      if (comm != "bxsim-hw") continue;
      const pid_t tid = pid_t(std::stoi(e->d_name));
      cpu_set_t old;
      if (sched_getaffinity(tid, sizeof(old), &old) == 0 && Pin(tid, cpus[0])) {
        saved_.emplace_back(tid, old);
      }
    }
    closedir(dir);
    if (!saved_.empty() && Pin(0, cpus[1])) saved_.emplace_back(0, allowed);
  }
  ~PinApartFromHardware() {
    for (auto& [tid, set] : saved_) sched_setaffinity(tid, sizeof(set), &set);
  }
  PinApartFromHardware(const PinApartFromHardware&) = delete;
  PinApartFromHardware& operator=(const PinApartFromHardware&) = delete;

 private:
  static bool Pin(pid_t tid, int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(tid, sizeof(set), &set) == 0;
  }
  std::vector<std::pair<pid_t, cpu_set_t>> saved_;  // tid (0: this thread), affinity to restore
};

TEST_F(CompletionTest, UnsignalledWorkIsRetiredByTheNextSignalledCompletion) {
  QpOptions o;
  o.send_wr = 8;
  Connect(o, o);
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  constexpr int kRounds = 500;
  const uint64_t sent_before = Counters(a_.ctx).packets_sent;
  for (int round = 0; round < kRounds; ++round) {
    // A full queue of 7 unsignalled writes and 1 signalled: possible only if the previous round's
    // signalled completion freed all 8 slots.
    for (int i = 0; i < 7; ++i)
      ASSERT_EQ(
          PostSend(a_.qp, IBV_WR_RDMA_WRITE, uint64_t(i), &s, 1, 0, dst->addr(), dst->mr->rkey), 0)
          << "round " << round;
    ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1000 + uint64_t(round), &s, 1, IBV_SEND_SIGNALED,
                       dst->addr(), dst->mr->rkey),
              0);
    auto wc = PollN(a_.send_cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    ASSERT_EQ(wc[0].wr_id, 1000 + uint64_t(round))
        << "only signalled work completes: " << ibv_wc_status_str(wc[0].status);
    ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
  }
  EXPECT_TRUE(Drain(a_.send_cq).empty());
  EXPECT_EQ(Counters(a_.ctx).packets_sent - sent_before, uint64_t(kRounds) * 8);
}

TEST_F(CompletionTest, SqSigAllSignalsEveryRequest) {
  QpOptions o;
  o.sq_sig_all = 1;
  Connect(o, o);
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, uint64_t(i), &s, 1, 0, dst->addr(), dst->mr->rkey),
              0);
  auto wc = PollN(a_.send_cq, 10);
  ASSERT_EQ(wc.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(wc[size_t(i)].wr_id, uint64_t(i));
}

TEST_F(CompletionTest, CompletionChannelDeliversOneEventPerArm) {
  Connect();
  ibv_comp_channel* channel = ibv_create_comp_channel(b_.ctx);
  ASSERT_NE(channel, nullptr);
  ASSERT_GE(channel->fd, 0);
  ibv_cq* cq = ibv_create_cq(b_.ctx, 16, reinterpret_cast<void*>(0x1234), channel, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), EBUSY) << "a CQ still uses it";

  // A second QP pair whose receive CQ is the one with the channel.
  Endpoint c, d;
  c.ctx = a_.ctx;
  d.ctx = b_.ctx;
  QpOptions o;
  CreateQp(c, o);
  d.pd = ibv_alloc_pd(d.ctx);
  d.qp_pd = d.pd;
  d.send_cq = ibv_create_cq(d.ctx, 16, nullptr, nullptr, 0);
  d.recv_cq = cq;
  ibv_qp_init_attr init{};
  init.send_cq = d.send_cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {8, 8, 1, 1, 0};
  d.qp = ibv_create_qp(d.pd, &init);
  ASSERT_NE(d.qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(d.qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            0);
  ASSERT_EQ(ibv_query_gid(d.ctx, 1, 0, &d.gid), 0);
  ConnectQp(c, d.qp->qp_num, d.gid, o);
  ConnectQp(d, c.qp->qp_num, c.gid, o);

  auto src = Register(c.pd, 64);
  auto dst = Register(d.pd, 64);
  ibv_sge r{dst->addr(), 64, dst->mr->lkey};
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  pollfd pfd{channel->fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "no event before a completion";
  ASSERT_EQ(PostRecv(d.qp, 1, &r, 1), 0);
  ASSERT_EQ(PostRecv(d.qp, 2, &r, 1), 0);
  ASSERT_EQ(PostSend(c.qp, IBV_WR_SEND, 1, &s, 1, 0), 0);
  ASSERT_EQ(poll(&pfd, 1, 5000), 1) << "the channel fd became readable";
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, cq);
  EXPECT_EQ(ev_ctx, reinterpret_cast<void*>(0x1234));
  EXPECT_EQ(PollN(cq, 1).size(), 1u);
  // Not re-armed: the next completion raises no event.
  ASSERT_EQ(PostSend(c.qp, IBV_WR_SEND, 2, &s, 1, 0), 0);
  EXPECT_EQ(PollN(cq, 1).size(), 1u);
  EXPECT_EQ(poll(&pfd, 1, 20), 0);
  ibv_ack_cq_events(cq, 1);

  src.reset();
  dst.reset();
  c.ctx = nullptr;
  DestroyEndpoint(c);
  EXPECT_EQ(ibv_destroy_qp(d.qp), 0);
  EXPECT_EQ(ibv_destroy_cq(d.send_cq), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(d.pd), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

// A sleeping poller polls, arms the CQ, polls once more and only then sleeps on the channel.
// Arming races the hardware writing a completion: each side stores (`armed` / the CQE) and then
// loads the other's store, so unless both are fenced both can read the old values, and the
// poller sleeps on an empty-looking CQ that the hardware found unarmed. Each round lands the arm
// at a different moment relative to the completion; none may leave the poller asleep.
TEST_F(CompletionTest, ArmingRacingACompletionNeverLosesTheWakeUp) {
  ibv_comp_channel* channel = ConnectWithSendChannel();
  ASSERT_NE(channel, nullptr);
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  ibv_cq* cq = a_.send_cq;
  constexpr int kRounds = 50000;
  // Far beyond any scheduling delay: asleep this long with the completion in the CQ is a lost
  // wake-up, not a slow host.
  constexpr int kSleepMs = 5000;
  int lost_round = -1;
  uint64_t sleeps = 0;
  std::mt19937 rng(7);
  auto rounds = [&] {
    PinApartFromHardware pin;
    for (int round = 0; round < kRounds && lost_round < 0; ++round) {
      ASSERT_EQ(
          PostSend(a_.qp, IBV_WR_RDMA_WRITE, uint64_t(round), &s, 1, 0, dst->addr(), dst->mr->rkey),
          0);
      // Up to a few microseconds of other work (a completion takes about that long), so the arm
      // falls before, during and after the hardware's write of the completion.
      const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(rng() % 4000);
      while (std::chrono::steady_clock::now() < until) {
      }
      ibv_wc wc{};
      int got = ibv_poll_cq(cq, 1, &wc);
      while (got == 0) {
        ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
        got = ibv_poll_cq(cq, 1, &wc);
        if (got != 0) break;
        ++sleeps;
        pollfd pfd{channel->fd, POLLIN, 0};
        const int ready = poll(&pfd, 1, kSleepMs);
        ASSERT_GE(ready, 0) << strerror(errno);
        if (ready == 0) {
          got = ibv_poll_cq(cq, 1, &wc);
          if (got != 0) lost_round = round;
          continue;  // still empty: a slow host; sleep again
        }
        // An event, maybe left by an earlier round whose second poll found its completion.
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        ASSERT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), 0);
        ibv_ack_cq_events(ev_cq, 1);
        got = ibv_poll_cq(cq, 1, &wc);
      }
      ASSERT_EQ(got, 1);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
      ASSERT_EQ(wc.wr_id, uint64_t(round));
    }
  };
  rounds();
  EXPECT_EQ(lost_round, -1) << "round " << lost_round << " slept " << kSleepMs
                            << " ms with its completion in the CQ (" << sleeps << " sleeps in all)";
  // The CQ may still be armed or hold an unread event. Destroying the QP waits out the hardware;
  // then every event written is read and acknowledged, as ibv_destroy_cq requires.
  EXPECT_EQ(ibv_destroy_qp(a_.qp), 0);
  a_.qp = nullptr;
  pollfd pfd{channel->fd, POLLIN, 0};
  while (poll(&pfd, 1, 0) == 1) {
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    if (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) != 0) break;
    ibv_ack_cq_events(ev_cq, 1);
  }
  src.reset();
  DestroyEndpoint(a_);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

TEST_F(CompletionTest, DestroyedQpCompletionsAreNeverReturned) {
  QpOptions o;
  o.sq_sig_all = 1;
  Connect(o, o);
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, uint64_t(i), &s, 1, 0, dst->addr(), dst->mr->rkey),
              0);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(ibv_destroy_qp(a_.qp), 0);
  a_.qp = nullptr;
  ibv_wc wc[8];
  EXPECT_EQ(ibv_poll_cq(a_.send_cq, 8, wc), 0);
}

// As the kernel does: an event the application never read is dropped when its CQ is destroyed,
// and destroy waits only for events it read and has not acknowledged. Here the application
// armed the CQ, the completion wrote an event, and it polled the CQ instead of reading the
// event (as pollers that mix busy polling and sleeping do).
TEST_F(CompletionTest, DestroyingACqDropsItsUnreadEventWithoutWaiting) {
  ibv_comp_channel* channel = ConnectWithSendChannel();
  ASSERT_NE(channel, nullptr);
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  ASSERT_EQ(ibv_req_notify_cq(a_.send_cq, 0), 0);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  ASSERT_EQ(PostSend(a_.qp, IBV_WR_RDMA_WRITE, 1, &s, 1, 0, dst->addr(), dst->mr->rkey), 0);
  pollfd pfd{channel->fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1) << "the completion wrote an event";
  ASSERT_EQ(PollN(a_.send_cq, 1).size(), 1u);

  ASSERT_EQ(ibv_destroy_qp(a_.qp), 0);
  a_.qp = nullptr;
  std::promise<int> destroyed;
  std::thread destroyer([cq = a_.send_cq, &destroyed] { destroyed.set_value(ibv_destroy_cq(cq)); });
  std::future<int> result = destroyed.get_future();
  if (result.wait_for(std::chrono::seconds(1)) != std::future_status::ready) {
    destroyer.detach();  // blocked for good: the process ends with the test
    a_.send_cq = nullptr;
    FAIL() << "ibv_destroy_cq waited for an event nobody read";
  }
  destroyer.join();
  a_.send_cq = nullptr;
  EXPECT_EQ(result.get(), 0);

  // The dropped event is not handed out (its CQ, and perhaps its memory, are gone).
  ASSERT_EQ(fcntl(channel->fd, F_SETFL, O_NONBLOCK), 0);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  EXPECT_EQ(ibv_get_cq_event(channel, &ev_cq, &ev_ctx), -1) << "got an event of a destroyed CQ";
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

// A doorbell is serviced inline by the posting thread when the device lock is free. When a
// control verb (ibv_query_qp here; ibv_modify_qp or ibv_destroy_qp of another connection in a
// real program) holds it, the request must still reach the hardware: the send below must
// complete though no later doorbell rings. (It stayed queued, with the hardware thread asleep,
// until the next doorbell: CI saw an engine wait 10 s for its QP's flush.)
TEST_F(CompletionTest, ADoorbellRungWhileAControlVerbHoldsTheDeviceIsServiced) {
  QpOptions o;
  o.sq_sig_all = 1;
  Connect(o, {});
  auto src = Register(a_.pd, 64);
  auto dst = Register(b_.pd, 64);
  ibv_sge s{src->addr(), 8, src->mr->lkey};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> queries{0};
  std::thread control([&] {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    while (!stop.load(std::memory_order_relaxed)) {
      if (ibv_query_qp(b_.qp, &attr, IBV_QP_STATE, &init) == 0) queries.fetch_add(1);
    }
  });
  // Far beyond any scheduling delay: a request still queued after this is stranded.
  constexpr auto kStranded = std::chrono::seconds(3);
  constexpr int kRounds = 1000;  // the old code stranded one within 20
  int stranded_round = -1;
  for (int round = 0; round < kRounds && stranded_round < 0; ++round) {
    // Idle long enough for the hardware thread to stop polling and sleep (BX_SIM_SPIN_US).
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    ASSERT_EQ(
        PostSend(a_.qp, IBV_WR_RDMA_WRITE, uint64_t(round), &s, 1, 0, dst->addr(), dst->mr->rkey),
        0);
    std::vector<ibv_wc> wc = PollN(a_.send_cq, 1, kStranded);
    if (wc.empty()) {
      stranded_round = round;
      break;
    }
    ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[0].status);
  }
  stop.store(true);
  control.join();
  EXPECT_GT(queries.load(), 0u);
  EXPECT_EQ(stranded_round, -1) << "round " << stranded_round << "'s send was not serviced in "
                                << kStranded.count() << " s beside " << queries.load()
                                << " ibv_query_qp calls";
}

}  // namespace
}  // namespace bx::simnic::testing
