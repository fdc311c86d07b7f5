#include "common/backoff.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

namespace stallscope {
namespace {

using test::kMs;

TEST(RetryBackoff, DelaysDoubleWhileAttemptsFailAndASuccessStartsOver) {
  RetryBackoff backoff(100 * kMs, 300 * kMs);
  int attempts = 0;
  auto fail = [&] {
    ++attempts;
    throw Error(ErrorKind::postgres, "cannot connect to 'host=x'");
  };
  auto succeed = [&] { ++attempts; };
  // Due at once; the failure's message comes back and delays the next try.
  EXPECT_EQ(backoff.attempt_if_due(0, fail), "cannot connect to 'host=x'");
  EXPECT_EQ(backoff.attempt_if_due(99 * kMs, fail), std::nullopt);
  EXPECT_EQ(attempts, 1);
  EXPECT_TRUE(backoff.attempt_if_due(100 * kMs, fail));  // then 200 ms
  EXPECT_FALSE(backoff.attempt_if_due(299 * kMs, fail));
  EXPECT_TRUE(backoff.attempt_if_due(300 * kMs, fail));  // then 300 (capped), not 400
  EXPECT_FALSE(backoff.attempt_if_due(599 * kMs, fail));
  EXPECT_TRUE(backoff.attempt_if_due(600 * kMs, fail));
  EXPECT_EQ(attempts, 4);
  EXPECT_FALSE(backoff.attempt_if_due(900 * kMs, succeed));
  EXPECT_EQ(attempts, 5);
  // After a success the next failure waits the first delay again.
  EXPECT_TRUE(backoff.attempt_if_due(1000 * kMs, fail));
  EXPECT_FALSE(backoff.attempt_if_due(1099 * kMs, fail));
  EXPECT_TRUE(backoff.attempt_if_due(1100 * kMs, fail));
  EXPECT_EQ(attempts, 7);
}

TEST(BackoffDelays, DoubleFromTheFirstDelayUpToTheMaximum) {
  constexpr BackoffDelays delays{.first_delay_ns = 100 * kMs, .max_delay_ns = 1'600 * kMs};
  EXPECT_EQ(delays.after_failures(1), 100 * kMs);
  EXPECT_EQ(delays.after_failures(2), 200 * kMs);
  EXPECT_EQ(delays.after_failures(5), 1'600 * kMs);
  EXPECT_EQ(delays.after_failures(6), 1'600 * kMs);
  EXPECT_EQ(delays.after_failures(1'000), 1'600 * kMs);  // no overflow
}

}  // namespace
}  // namespace stallscope
