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

TEST(Parse, WholeDecimalsParse) {
  EXPECT_EQ(parse_double("2"), 2.0);
  EXPECT_EQ(parse_double("-0.25"), -0.25);
  EXPECT_EQ(parse_double(".5"), 0.5);
  EXPECT_EQ(parse_double("1."), 1.0);
  EXPECT_EQ(parse_double("1.5e3"), 1500.0);
}

TEST(Parse, DecimalGarbageIsEmpty) {
  EXPECT_EQ(parse_double(""), std::nullopt);
  EXPECT_EQ(parse_double("."), std::nullopt);
  EXPECT_EQ(parse_double("1.2.3"), std::nullopt);
  EXPECT_EQ(parse_double("12x"), std::nullopt);
  EXPECT_EQ(parse_double(" 1"), std::nullopt);
  EXPECT_EQ(parse_double("+1"), std::nullopt);
  EXPECT_EQ(parse_double("0x10"), std::nullopt);
}

TEST(Parse, DecimalOutOfRangeIsEmpty) {
  EXPECT_EQ(parse_double("1e400"), std::nullopt);
  EXPECT_EQ(parse_double("-1e400"), std::nullopt);
}

}  // namespace
// C's readings, for what pgbench reads with strtod and atoi.
TEST(Parse, CDoubleReadsAsStrtodButWhole) {
  EXPECT_EQ(parse_c_double(" -2.5"), -2.5);
  EXPECT_EQ(parse_c_double("0x10"), 16.0);
  EXPECT_EQ(parse_c_double("+1e3"), 1000.0);
  EXPECT_FALSE(parse_c_double("2.5x"));
  EXPECT_FALSE(parse_c_double(""));
  EXPECT_FALSE(parse_c_double("1e400"));
}

TEST(Parse, LeadingIntegerReadsAsAtoi) {
  EXPECT_EQ(parse_leading_integer(" 42ms"), 42);
  EXPECT_EQ(parse_leading_integer("-7"), -7);
  EXPECT_EQ(parse_leading_integer("0"), 0);
  EXPECT_FALSE(parse_leading_integer("abc"));
  EXPECT_FALSE(parse_leading_integer(""));
}

TEST(Parse, HexadecimalWhenAskedForAndWhole) {
  EXPECT_EQ(parse_integer<int>("1F90", 16), 0x1F90);
  EXPECT_EQ(parse_integer<std::int64_t>("00000000", 16), 0);
  EXPECT_FALSE(parse_integer<int>("1F90", 10));
  EXPECT_FALSE(parse_integer<int>("1G", 16));
  EXPECT_FALSE(parse_integer<int>("", 16));
}

}  // namespace stallscope::common
