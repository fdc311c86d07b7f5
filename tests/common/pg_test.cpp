#include "common/pg.h"

#include <libpq-fe.h>

#include <cstring>

#include <gtest/gtest.h>

namespace stallscope {
namespace {

// A one-row result with columns "n" and "t", made without a server.
pg::Result result_of(const char* n, const char* t) {
  pg::Result res(PQmakeEmptyPGresult(nullptr, PGRES_TUPLES_OK));
  PGresAttDesc cols[2] = {};
  cols[0].name = const_cast<char*>("n");
  cols[1].name = const_cast<char*>("t");
  cols[0].format = cols[1].format = 0;  // text
  EXPECT_TRUE(PQsetResultAttrs(res.get(), 2, cols));
  // A NULL value is a length of -1.
  EXPECT_TRUE(
      PQsetvalue(res.get(), 0, 0, const_cast<char*>(n), n ? static_cast<int>(std::strlen(n)) : -1));
  EXPECT_TRUE(
      PQsetvalue(res.get(), 0, 1, const_cast<char*>(t), t ? static_cast<int>(std::strlen(t)) : -1));
  return res;
}

TEST(PgValues, ReadIntegersTextAndNulls) {
  auto res = result_of("-42", "hello");
  EXPECT_EQ(pg::int64_or_null(res.get(), 0, 0), -42);
  EXPECT_EQ(pg::text_or_null(res.get(), 0, 1), "hello");
  auto nulls = result_of(nullptr, nullptr);
  EXPECT_EQ(pg::int64_or_null(nulls.get(), 0, 0), std::nullopt);
  EXPECT_EQ(pg::text_or_null(nulls.get(), 0, 1), std::nullopt);
}

TEST(PgValues, GarbageIsNoIntegerNotZero) {
  auto res = result_of("12abc", "");
  EXPECT_EQ(pg::int64_or_null(res.get(), 0, 0), std::nullopt);
  EXPECT_EQ(pg::int64_or_null(res.get(), 0, 1), std::nullopt);  // empty text
  EXPECT_EQ(pg::text_or_null(res.get(), 0, 1), "");             // empty, not NULL
}

TEST(PgValues, MissingColumnReadsAsNull) {
  auto res = result_of("1", "x");
  EXPECT_EQ(pg::int64_or_null(res.get(), 0, PQfnumber(res.get(), "absent")), std::nullopt);
  EXPECT_EQ(pg::text_or_null(res.get(), 0, -1), std::nullopt);
}

}  // namespace
}  // namespace stallscope
