#include "common/parse.h"

#include <gtest/gtest.h>

namespace stallscope::common {
namespace {

TEST(Parse, WholeIntegersParse) {
  EXPECT_EQ(parse_int64("42"), 42);
  EXPECT_EQ(parse_int64("-7"), -7);
  EXPECT_EQ(parse_int64("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(parse_int("2147483647"), 2147483647);
}

TEST(Parse, GarbageIsNotZero) {
  EXPECT_EQ(parse_int64(""), std::nullopt);
  EXPECT_EQ(parse_int64("x"), std::nullopt);
  EXPECT_EQ(parse_int64("4x"), std::nullopt);
  EXPECT_EQ(parse_int64(" 4"), std::nullopt);
  EXPECT_EQ(parse_int64("1.5"), std::nullopt);
}

TEST(Parse, OutOfRangeIsEmpty) {
  EXPECT_EQ(parse_int64("9223372036854775808"), std::nullopt);
  EXPECT_EQ(parse_int("2147483648"), std::nullopt);
}

}  // namespace
}  // namespace stallscope::common
