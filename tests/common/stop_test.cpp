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

}  // namespace
}  // namespace stallscope
