// BX_RETURN_IF_ERROR and BX_ASSIGN_OR_RETURN: each returns the error early from a function that
// returns Status or Result<U>, passes the value on otherwise, and evaluates its argument once.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "bx/status.h"

namespace bx {
namespace {

Status Check(bool ok, int* calls) {
  ++*calls;
  return ok ? Status::Ok() : Aborted("check failed");
}

Result<std::unique_ptr<int>> MakeInt(bool ok, int value, int* calls) {
  ++*calls;
  if (!ok) return NotFound("no int " + std::to_string(value));
  return std::make_unique<int>(value);
}

// --- BX_RETURN_IF_ERROR ---

Status CheckTwiceForStatus(bool first, bool second, int* calls, bool* reached_end) {
  BX_RETURN_IF_ERROR(Check(first, calls));
  BX_RETURN_IF_ERROR(Check(second, calls));
  *reached_end = true;
  return Status::Ok();
}

Result<int> CheckForResult(bool ok, int* calls) {
  BX_RETURN_IF_ERROR(Check(ok, calls));
  return 7;
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheFirstErrorFromAStatusFunction) {
  int calls = 0;
  bool reached_end = false;
  Status s = CheckTwiceForStatus(false, true, &calls, &reached_end);
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_EQ(s.message(), "check failed");
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(reached_end);

  calls = 0;
  s = CheckTwiceForStatus(true, false, &calls, &reached_end);
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(reached_end);

  calls = 0;
  EXPECT_TRUE(CheckTwiceForStatus(true, true, &calls, &reached_end).ok());
  EXPECT_EQ(calls, 2);  // each argument evaluated exactly once
  EXPECT_TRUE(reached_end);
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheErrorFromAResultFunction) {
  int calls = 0;
  Result<int> r = CheckForResult(false, &calls);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted);
  EXPECT_EQ(r.status().message(), "check failed");
  EXPECT_EQ(calls, 1);

  calls = 0;
  r = CheckForResult(true, &calls);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(calls, 1);
}

// --- BX_ASSIGN_OR_RETURN ---

// Two uses in one scope, both declaring a variable.
Status SumForStatus(bool first, bool second, int* calls, int* sum) {
  BX_ASSIGN_OR_RETURN(auto a, MakeInt(first, 1, calls));
  BX_ASSIGN_OR_RETURN(std::unique_ptr<int> b, MakeInt(second, 2, calls));
  *sum = *a + *b;
  return Status::Ok();
}

// A Result<U> function whose U differs from the T of the Results it unwraps.
Result<std::string> DescribeForResult(bool ok, int* calls) {
  BX_ASSIGN_OR_RETURN(std::unique_ptr<int> value, MakeInt(ok, 5, calls));
  return "value " + std::to_string(*value);
}

// Assigns to a variable declared before the macro.
Result<std::unique_ptr<int>> ReplaceExisting(bool ok, int* calls) {
  auto existing = std::make_unique<int>(1);
  BX_ASSIGN_OR_RETURN(existing, MakeInt(ok, 9, calls));
  return existing;
}

TEST(StatusMacrosTest, AssignOrReturnReturnsTheErrorFromAStatusFunction) {
  int calls = 0;
  int sum = 0;
  Status s = SumForStatus(false, true, &calls, &sum);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no int 1");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(sum, 0);

  calls = 0;
  s = SumForStatus(true, false, &calls, &sum);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no int 2");
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(sum, 0);
}

TEST(StatusMacrosTest, AssignOrReturnMovesTheValuesOutOnSuccess) {
  int calls = 0;
  int sum = 0;
  EXPECT_TRUE(SumForStatus(true, true, &calls, &sum).ok());
  EXPECT_EQ(sum, 3);
  EXPECT_EQ(calls, 2);  // each argument evaluated exactly once
}

TEST(StatusMacrosTest, AssignOrReturnReturnsTheErrorFromAResultFunctionOfAnotherType) {
  int calls = 0;
  Result<std::string> r = DescribeForResult(false, &calls);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "no int 5");
  EXPECT_EQ(calls, 1);

  calls = 0;
  r = DescribeForResult(true, &calls);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "value 5");
  EXPECT_EQ(calls, 1);
}

TEST(StatusMacrosTest, AssignOrReturnAssignsToAnExistingVariable) {
  int calls = 0;
  Result<std::unique_ptr<int>> r = ReplaceExisting(true, &calls);
  ASSERT_TRUE(r.ok());
  ASSERT_NE(*r, nullptr);
  EXPECT_EQ(**r, 9);
  EXPECT_EQ(calls, 1);

  calls = 0;
  r = ReplaceExisting(false, &calls);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "no int 9");
  EXPECT_EQ(calls, 1);
}

// A comma inside the expression (template arguments) needs no extra parentheses.
template <typename A, typename B>
Result<int> SizeOfPair(int* calls) {
  ++*calls;
  return static_cast<int>(sizeof(std::pair<A, B>));
}

Status ReadPairSize(int* calls, int* size) {
  BX_ASSIGN_OR_RETURN(*size, SizeOfPair<char, char>(calls));
  return Status::Ok();
}

TEST(StatusMacrosTest, AssignOrReturnAcceptsACommaInTheExpression) {
  int calls = 0;
  int size = 0;
  EXPECT_TRUE(ReadPairSize(&calls, &size).ok());
  EXPECT_EQ(size, 2);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace bx
