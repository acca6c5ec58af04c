#include "core/status.h"

#include <gtest/gtest.h>

namespace tailor {
namespace {

TEST(StatusTest, DefaultIsOkWithEmptyMessage) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "ok");
}

TEST(StatusTest, PrefixedAddsContextAndKeepsCode) {
  Status s = Status::not_found("open: no such file").prefixed("loading checkpoint step 400");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "loading checkpoint step 400: open: no such file");
  EXPECT_EQ(s.to_string(), "not found: loading checkpoint step 400: open: no such file");
}

TEST(StatusTest, PrefixingOkStaysOk) { EXPECT_TRUE(Status::ok().prefixed("context").is_ok()); }

Result<int> half(int v) {
  if (v % 2 != 0) return Status::invalid_argument("odd");
  return v / 2;
}

Result<int> quarter(int v) {
  TAILOR_ASSIGN_OR_RETURN(int h, half(v));
  return half(h);
}

TEST(ResultTest, AssignOrReturnPropagatesFirstError) {
  EXPECT_EQ(*quarter(8), 2);
  Result<int> r = quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(quarter(5).is_ok());
}

TEST(ResultTest, OkResultHasOkStatus) {
  Result<std::string> r = std::string("x");
  EXPECT_TRUE(r.status().is_ok());
  EXPECT_EQ(r->size(), 1u);
}

}  // namespace
}  // namespace tailor
