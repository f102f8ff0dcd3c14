// CreateRcQueuePair and ConnectRc between bxsim0 and bxsim1.
#include <gtest/gtest.h>

#include "verbs/rc_connect.h"
#include "verbs/tests/test_support.h"

namespace bx::verbs {
namespace {

TEST(RcConnectTest, ConnectsTwoQueuePairsToRts) {
  BX_REQUIRE_SIMNIC();
  auto lib = Library::Load("sim");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  auto a = Device::Open(**lib, "bxsim0");
  auto b = Device::Open(**lib, "bxsim1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();

  QueuePairAttrs attrs;
  auto qa = CreateRcQueuePair(**lib, a->context(), a->pd(), attrs);
  auto qb = CreateRcQueuePair(**lib, b->context(), b->pd(), attrs);
  ASSERT_TRUE(qa.ok()) << qa.status().ToString();
  ASSERT_TRUE(qb.ok()) << qb.status().ToString();
  EXPECT_NE(qa->cq(), nullptr);
  EXPECT_EQ(qa->qp()->qp_type, IBV_QPT_RC);

  RcOptions options;
  options.psn = 1234;
  Status connect_a = ConnectRc(**lib, qa->qp(), 1, qb->qp_num(), b->gid(), options);
  ASSERT_TRUE(connect_a.ok()) << connect_a.ToString();
  Status connect_b = ConnectRc(**lib, qb->qp(), 1, qa->qp_num(), a->gid(), options);
  ASSERT_TRUE(connect_b.ok()) << connect_b.ToString();

  if (lib.value()->query_qp != nullptr) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(lib.value()->query_qp(qa->qp(), &attr, IBV_QP_STATE | IBV_QP_DEST_QPN, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(attr.dest_qp_num, qb->qp_num());
  }
}

TEST(RcConnectTest, ModifyErrorNamesTheQpAndTheTransition) {
  BX_REQUIRE_SIMNIC();
  auto lib = Library::Load("sim");
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  auto a = Device::Open(**lib, "bxsim0");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto qa = CreateRcQueuePair(**lib, a->context(), a->pd(), QueuePairAttrs{});
  ASSERT_TRUE(qa.ok()) << qa.status().ToString();
  // RESET -> RTR skips INIT, which every RNIC rejects.
  Status status = MoveRcToRts(**lib, qa->qp(), 1, 1, a->gid(), RcOptions{});
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("INIT->RTR"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("qp " + std::to_string(qa->qp_num())), std::string::npos)
      << status.ToString();
}

}  // namespace
}  // namespace bx::verbs
