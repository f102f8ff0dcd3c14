// Result<T>::value() on an error throws bx::BadResultAccess carrying the Status (not
// std::bad_variant_access, which said nothing of the cause).
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "bx/status.h"

namespace bx {
namespace {

TEST(ResultValueTest, ValueOnAnErrorThrowsBadResultAccessNamingTheStatus) {
  Result<std::string> missing = NotFound("no row for key 7");
  try {
    (void)missing.value();
    FAIL() << "value() on an error returned";
  } catch (const BadResultAccess& e) {
    EXPECT_STREQ(e.what(), "NOT_FOUND: no row for key 7");
    EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  }
}

TEST(ResultValueTest, EveryAccessorOnAnErrorThrows) {
  Result<std::string> missing = Unavailable("peer gone");
  const Result<std::string>& as_const = missing;
  EXPECT_THROW((void)as_const.value(), BadResultAccess);
  EXPECT_THROW((void)*missing, BadResultAccess);
  EXPECT_THROW((void)missing->size(), BadResultAccess);
  EXPECT_THROW((void)std::move(missing).value(), BadResultAccess);
}

// A Result from an OK Status has no value to give: it must not look like a success either way
// it is asked (before: an assert in Debug builds only; in Release ok() was false while status()
// was OK, so BX_ASSIGN_OR_RETURN returned OK from a function that produced nothing).
TEST(ResultValueTest, ResultFromAnOkStatusIsAnInternalError) {
  Result<int> nothing = Status::Ok();
  EXPECT_FALSE(nothing.ok());
  EXPECT_EQ(nothing.status().code(), StatusCode::kInternal);
  EXPECT_NE(nothing.status().message().find("OK Status"), std::string::npos);
  EXPECT_THROW((void)nothing.value(), BadResultAccess);
}

TEST(ResultValueTest, ValueOnSuccessReturnsIt) {
  Result<std::string> found = std::string("row");
  EXPECT_EQ(found.value(), "row");
  EXPECT_EQ(std::move(found).value(), "row");
}

}  // namespace
}  // namespace bx
