// BX_DCHECK (base/dcheck.h) and the thread rule it checks most: methods documented "I/O thread
// only" abort when another thread calls them, in Debug and sanitizer builds.
#include "base/dcheck.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "base/io_thread.h"

namespace bx {
namespace {

#ifndef NDEBUG

class DcheckDeathTest : public ::testing::Test {
 protected:
  // The child runs the test from the start (no fork beside the I/O thread's locks).
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(DcheckDeathTest, AFailedCheckAbortsNamingItsConditionAndPlace) {
  EXPECT_DEATH(BX_DCHECK(1 + 1 == 3), R"(check failed: 1 \+ 1 == 3 \(.*dcheck_test\.cc:[0-9]+\))");
}

TEST_F(DcheckDeathTest, AnIoThreadOnlyCallFromAnotherThreadAborts) {
  Result<std::shared_ptr<IoThread>> io = IoThread::Start({});
  ASSERT_TRUE(io.ok());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  (*io)->RunAndWait([&] { ASSERT_TRUE((*io)->Watch(fds[0], [] {}).ok()); });
  EXPECT_DEATH((*io)->Unwatch(fds[0]), "check failed: OnLoopOrEnded");
  // On its own thread the same call is the rule kept; once the loop has ended any thread may
  // (posted work then runs on the posters' threads).
  (*io)->RunAndWait([&] { (*io)->Unwatch(fds[0]); });
  (*io)->Stop();
  ASSERT_TRUE((*io)->Watch(fds[0], [] {}).code() != StatusCode::kOk);
  (*io)->Unwatch(fds[0]);
  close(fds[0]);
  close(fds[1]);
}

TEST(DcheckTest, APassingCheckEvaluatesItsConditionOnce) {
  int evaluated = 0;
  BX_DCHECK(++evaluated == 1);
  EXPECT_EQ(evaluated, 1);
}

#else

TEST(DcheckTest, UnderNdebugTheConditionIsNotEvaluated) {
  int evaluated = 0;
  BX_DCHECK(++evaluated == 1);
  EXPECT_EQ(evaluated, 0);
}

#endif

}  // namespace
}  // namespace bx
