#include "flow_control/send_window.h"

#include <gtest/gtest.h>

namespace bx::flow_control {
namespace {

TEST(SendWindow, BoundsOutstandingBytes) {
  SendWindow w(100);
  EXPECT_TRUE(w.CanPost(60));
  w.OnPosted(60);
  EXPECT_TRUE(w.CanPost(40));
  EXPECT_FALSE(w.CanPost(41));
  w.OnPosted(40);
  EXPECT_EQ(w.outstanding(), 100u);
  w.OnCompleted(60);
  EXPECT_TRUE(w.CanPost(60));
  EXPECT_FALSE(w.CanPost(61));
  EXPECT_EQ(w.max_outstanding(), 100u);
}

TEST(SendWindow, OneRequestLargerThanTheWindowGoesAlone) {
  SendWindow w(100);
  EXPECT_TRUE(w.CanPost(1000)) << "nothing outstanding: a large request may go";
  w.OnPosted(1000);
  EXPECT_FALSE(w.CanPost(1)) << "but nothing beside it";
  w.OnCompleted(1000);
  EXPECT_TRUE(w.CanPost(1));
}

TEST(SendWindow, ZeroTurnsItOff) {
  SendWindow w(0);
  EXPECT_FALSE(w.enabled());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(w.CanPost(1 << 20));
    w.OnPosted(1 << 20);
  }
  EXPECT_EQ(w.max_outstanding(), 10u << 20);
}

}  // namespace
}  // namespace bx::flow_control
