// Retrying after failures, with one schedule of delays: at once the first
// time, then after first_delay_ns, doubling up to max_delay_ns while
// attempts keep failing; a success starts over.
//
// BackoffDelays is the schedule alone, for a caller that tracks its own
// attempts (the driver's reconnects, which are asynchronous and record each
// failed attempt: driver/reconnect.cpp). RetryBackoff runs a
// synchronous attempt when it is due, for a polling thread (ASH, pooler)
// that may reconnect after losing its connection:
//
//   if (!conn) {
//     if (auto error = backoff.attempt_if_due(mono_now_ns(), [&] { connect(); })) note(*error);
//   }
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/units.h"

namespace stallscope {

struct BackoffDelays {
  std::int64_t first_delay_ns = 100 * common::kNsPerMs;
  std::int64_t max_delay_ns = 5 * common::kNsPerS;

  // The wait before the next attempt after `failures` (≥ 1) failed ones in a
  // row: first_delay_ns × 2^(failures − 1), at most max_delay_ns.
  constexpr std::int64_t after_failures(int failures) const noexcept {
    std::int64_t delay_ns = first_delay_ns;
    for (int i = 1; i < failures && delay_ns < max_delay_ns; ++i) delay_ns *= 2;
    return std::min(delay_ns, max_delay_ns);
  }
};

class RetryBackoff {
 public:
  explicit RetryBackoff(std::int64_t first_delay_ns = 100 * common::kNsPerMs,
                        std::int64_t max_delay_ns = 5 * common::kNsPerS)
      : delays_{first_delay_ns, max_delay_ns} {}

  // Runs `attempt` when the next retry is due at `now_ns` (CLOCK_MONOTONIC,
  // ns). Returns the message of the stallscope::Error it threw (the next
  // retry is then delayed), else nothing — also when not yet due. Other
  // exceptions pass through.
  template <class F>
  std::optional<std::string> attempt_if_due(std::int64_t now_ns, F&& attempt) {
    if (now_ns < retry_at_ns_) return std::nullopt;
    try {
      attempt();
      failures_ = 0;
      return std::nullopt;
    } catch (const Error& e) {
      ++failures_;
      retry_at_ns_ = now_ns + delays_.after_failures(failures_);
      return e.what();
    }
  }

 private:
  BackoffDelays delays_;
  int failures_ = 0;  // in a row
  std::int64_t retry_at_ns_ = 0;
};

}  // namespace stallscope
