#include "common/stop.h"

#include <gtest/gtest.h>

namespace stallscope {
namespace {

TEST(StopToken, DefaultNeverStops) {
  StopToken never;
  EXPECT_FALSE(never.stop_requested());
}

TEST(StopToken, SeesItsSourceAndOnlyItsSource) {
  StopSource a;
  StopSource b;
  const StopToken ta = a.token();
  const StopToken copy = ta;
  EXPECT_FALSE(ta.stop_requested());
  a.request_stop();
  EXPECT_TRUE(ta.stop_requested());
  EXPECT_TRUE(copy.stop_requested());
  EXPECT_TRUE(a.stop_requested());
  EXPECT_FALSE(b.token().stop_requested());
}

TEST(StopToken, GlobalTokenIsTheGlobalFlag) {
  reset_stop();
  const StopToken global = global_stop_token();
  EXPECT_FALSE(global.stop_requested());
  request_stop();
  EXPECT_TRUE(global.stop_requested());
  reset_stop();
  EXPECT_FALSE(global.stop_requested());
}

TEST(StopToken, EitherOfStopsWhenEitherDoes) {
  StopSource a;
  StopSource b;
  const StopToken both = either_of(a.token(), b.token());
  EXPECT_FALSE(both.stop_requested());
  b.request_stop();
  EXPECT_TRUE(both.stop_requested());
  EXPECT_FALSE(a.stop_requested());

  StopSource c;
  const StopToken with_global = either_of(global_stop_token(), c.token());
  reset_stop();
  EXPECT_FALSE(with_global.stop_requested());
  request_stop();
  EXPECT_TRUE(with_global.stop_requested());
  reset_stop();
  EXPECT_FALSE(either_of(StopToken(), c.token()).stop_requested());
  EXPECT_THROW(either_of(both, c.token()), std::invalid_argument);
}

}  // namespace
}  // namespace stallscope
