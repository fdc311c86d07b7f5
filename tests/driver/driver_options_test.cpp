#include <gtest/gtest.h>

#include "common/error.h"
#include "driver/driver.h"

namespace stallscope::driver {
namespace {

TEST(Protocol, ParsesEachNameAndRoundTrips) {
  for (auto p : {Protocol::simple, Protocol::extended, Protocol::prepared}) {
    EXPECT_EQ(parse_protocol(protocol_name(p)), p);
  }
  EXPECT_STREQ(protocol_name(Protocol::extended), "extended");
}

TEST(Protocol, UnknownNameIsAUsageErrorNamingIt) {
  try {
    parse_protocol("pipeline");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("'pipeline'"), std::string::npos) << e.what();
  }
}

// Options are checked before any connection is attempted (the conninfo
// points nowhere, so reaching libpq would give a postgres error instead).
ErrorKind connect_error(DriverOptions o) {
  o.conninfo = "host=127.0.0.1 port=1 connect_timeout=1";
  Driver d(std::move(o), [](schema::Batch) {});
  try {
    d.connect();
  } catch (const Error& e) {
    return e.kind();
  }
  return ErrorKind::runtime;
}

TEST(Driver, RejectsBadOptionsBeforeConnecting) {
  DriverOptions neither{.sql = "SELECT 1"};
  EXPECT_EQ(connect_error(neither), ErrorKind::usage);
  DriverOptions both{.duration_s = 1.0, .queries_per_client = 1, .sql = "SELECT 1"};
  EXPECT_EQ(connect_error(both), ErrorKind::usage);
  DriverOptions no_clients{.clients = 0, .queries_per_client = 1, .sql = "SELECT 1"};
  EXPECT_EQ(connect_error(no_clients), ErrorKind::usage);
  DriverOptions empty_sql{.queries_per_client = 1, .sql = " ;\n"};
  EXPECT_EQ(connect_error(empty_sql), ErrorKind::usage);
  DriverOptions negative_time{.duration_s = -1.0, .sql = "SELECT 1"};
  EXPECT_EQ(connect_error(negative_time), ErrorKind::usage);
  DriverOptions fine{.queries_per_client = 1, .sql = "SELECT 1"};
  EXPECT_EQ(connect_error(fine), ErrorKind::postgres);
}

TEST(Driver, RunWithoutConnectIsAnError) {
  Driver d(DriverOptions{.queries_per_client = 1, .sql = "SELECT 1"}, [](schema::Batch) {});
  EXPECT_THROW(d.run(), Error);
  auto s = d.summary();
  EXPECT_EQ(s.queries, 0);
  EXPECT_EQ(s.tps, 0.0);
}

}  // namespace
}  // namespace stallscope::driver
