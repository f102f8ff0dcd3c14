// Our side of the ns-3 cross-check (validate.h), without ns-3: what the ECMP scenario's paths
// are, and what the two TCP options that the cross-check brought up change.
#include "sim/validate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bx::sim {
namespace {

IncastScenario Named(const std::string& name) {
  for (const IncastScenario& s : ValidationScenarios()) {
    if (s.name == name) return s;
  }
  ADD_FAILURE() << "no scenario " << name;
  return {};
}

// ns-3 is given these paths, so they must be the ones our Network takes: a flow that shares its
// uplink with another one finishes at about half the rate of a flow alone on its spine.
TEST(Validate, EcmpPathsAreTheOnesOurNetworkTakes) {
  IncastScenario s = Named("ecmp-8x1M");
  std::vector<EcmpPath> paths = EcmpPaths(s);
  IncastResult r = RunIncastScenario(s);
  ASSERT_TRUE(r.complete);
  ASSERT_EQ(paths.size(), r.flows.size());
  const double alone_us = double(s.bytes) * 8 / (s.gbps * 1e3);  // at line rate
  int shared = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    int on_same_uplink = 0;  // flows from the same leaf on the same spine, this one included
    for (size_t j = 0; j < paths.size(); ++j) {
      bool same_leaf = (s.receivers + i) % s.leaves == (s.receivers + j) % s.leaves;
      on_same_uplink += same_leaf && paths[j].data_spine == paths[i].data_spine;
    }
    if (on_same_uplink > 1) {
      ++shared;
      EXPECT_GT(r.flows[i].fct_us, 1.8 * alone_us) << "flow " << i;
    } else {
      EXPECT_LT(r.flows[i].fct_us, 1.3 * alone_us) << "flow " << i;
    }
  }
  EXPECT_GT(shared, 0) << "the scenario needs a collision to test anything";
}

// Flows 1 and 3 of ecmp-8x1M have their own data paths, but their ACKs cross an uplink that two
// other flows congest: queued with that data (as in ns-3) they slow the flows' slow start.
TEST(Validate, AcksQueuedWithDataSlowFlowsWhoseAcksCrossACongestedUplink) {
  IncastScenario s = Named("ecmp-8x1M");
  IncastResult with_data = RunIncastScenario(s);
  s.tcp_acks_with_data = false;
  IncastResult first = RunIncastScenario(s);
  for (size_t i : {1, 3}) {
    EXPECT_GT(with_data.flows[i].fct_us, 1.05 * first.flows[i].fct_us) << "flow " << i;
  }
}

// A long flow alone on its link (its NIC limits it) must not build a window it cannot use when
// cwnd grows only while it limits the sender: the short flows that join it later then get their
// share at once. measured: P50 FCT 440 against 1,359 us.
TEST(Validate, GrowingCwndOnlyWhileItLimitsLetsShortFlowsPastALongOne) {
  IncastScenario s = Named("background+incast-8x128K");
  double always = FctPercentile(RunIncastScenario(s), 0.5);
  s.tcp_cwnd_limited = true;
  double limited = FctPercentile(RunIncastScenario(s), 0.5);
  EXPECT_LT(limited, 0.5 * always);
  // Where every flow is cwnd-limited from the start, the option changes nothing.
  IncastScenario incast = Named("incast-4x256K");
  double before = FctPercentile(RunIncastScenario(incast), 0.99);
  incast.tcp_cwnd_limited = true;
  EXPECT_DOUBLE_EQ(FctPercentile(RunIncastScenario(incast), 0.99), before);
}

}  // namespace
}  // namespace bx::sim
