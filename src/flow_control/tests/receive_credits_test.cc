#include "flow_control/receive_credits.h"

#include <gtest/gtest.h>

#include <random>

namespace bx::flow_control {
namespace {

// The most credits one message returns (the engine's 12-bit immediate field).
constexpr uint32_t kMaxCreditsPerMessage = 0xfff;

TEST(SendCreditsTest, DataKeepsTheLastCreditForCreditUpdates) {
  SendCredits credits(3);
  EXPECT_TRUE(credits.CanSendData());
  credits.Spend();
  credits.Spend();
  EXPECT_EQ(credits.available(), 1u);
  EXPECT_FALSE(credits.CanSendData());
  EXPECT_TRUE(credits.CanSendCreditUpdate());
  credits.Spend();
  EXPECT_FALSE(credits.CanSendCreditUpdate());
  credits.Return(3);
  EXPECT_EQ(credits.available(), 3u);
}

TEST(CreditReturnerTest, RepostsInBatchesOfHalfTheDepth) {
  CreditReturner returner(64);
  EXPECT_EQ(returner.batch(), 32u);
  for (int i = 0; i < 31; ++i) EXPECT_FALSE(returner.OnReceiveConsumed());
  EXPECT_TRUE(returner.OnReceiveConsumed());
  returner.OnReposted(32);
  EXPECT_EQ(returner.owed(), 32u);
  EXPECT_TRUE(returner.NeedsCreditMessage());
  EXPECT_EQ(returner.Take(10), 10u);
  EXPECT_FALSE(returner.NeedsCreditMessage());
  EXPECT_EQ(returner.Take(100), 22u);
  EXPECT_EQ(returner.owed(), 0u);
}

// Two peers that both send as fast as credits allow, with random interleaving, never exceed
// the receiver's queue (no RNR) and never deadlock, for many depths.
TEST(CreditProtocolTest, RandomTrafficNeverOverrunsAndNeverDeadlocks) {
  for (uint32_t depth : {2u, 3u, 4u, 8u, 32u, 64u}) {
    struct Side {
      SendCredits credits;
      CreditReturner returner;
      uint32_t posted;         // receives posted at this side
      uint32_t in_flight = 0;  // messages sent to the peer not yet received (each holds a receive)
    };
    Side s[2] = {{SendCredits(depth), CreditReturner(depth), depth},
                 {SendCredits(depth), CreditReturner(depth), depth}};
    struct Msg {
      bool credit_only;
      uint32_t credits;
    };
    std::vector<Msg> wire[2];  // wire[i]: messages travelling to side i
    std::mt19937 rng(depth);
    uint64_t data_delivered = 0;
    for (int step = 0; step < 200000; ++step) {
      int i = int(rng() % 2);
      Side& me = s[i];
      Side& peer = s[1 - i];
      if (rng() % 2 == 0 && !wire[i].empty()) {
        // Deliver one message to side i: it consumes a posted receive.
        Msg m = wire[i].front();
        wire[i].erase(wire[i].begin());
        ASSERT_GT(me.posted, 0u) << "receiver not ready at depth " << depth;
        --me.posted;
        me.credits.Return(m.credits);
        ASSERT_LE(me.credits.available(), depth);
        if (!m.credit_only) ++data_delivered;
        if (me.returner.OnReceiveConsumed()) {
          me.posted += me.returner.batch();
          me.returner.OnReposted(me.returner.batch());
        }
      } else if (me.credits.CanSendData()) {
        me.credits.Spend();
        wire[1 - i].push_back({false, me.returner.Take(kMaxCreditsPerMessage)});
      } else if (me.returner.NeedsCreditMessage() && me.credits.CanSendCreditUpdate()) {
        me.credits.Spend();
        wire[1 - i].push_back({true, me.returner.Take(kMaxCreditsPerMessage)});
      }
      (void)peer;
    }
    EXPECT_GT(data_delivered, 10000u) << "traffic kept flowing at depth " << depth;
  }
}

}  // namespace
}  // namespace bx::flow_control
