// RetryBackoff — when a polling thread (ASH, pooler) may try to reconnect
// after losing its connection: at once the first time, then after
// first_delay_ns, doubling to max_delay_ns while attempts keep failing; a
// success starts over.
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

namespace stallscope {

class RetryBackoff {
 public:
  explicit RetryBackoff(std::int64_t first_delay_ns = 100'000'000,
                        std::int64_t max_delay_ns = 5'000'000'000)
      : first_delay_ns_(first_delay_ns), max_delay_ns_(max_delay_ns), delay_ns_(first_delay_ns) {}

  // Runs `attempt` when the next retry is due at `now_ns` (CLOCK_MONOTONIC,
  // ns). Returns the message of the stallscope::Error it threw (the next
  // retry is then delayed), else nothing — also when not yet due. Other
  // exceptions pass through.
  template <class F>
  std::optional<std::string> attempt_if_due(std::int64_t now_ns, F&& attempt) {
    if (now_ns < retry_at_ns_) return std::nullopt;
    try {
      attempt();
      delay_ns_ = first_delay_ns_;
      return std::nullopt;
    } catch (const Error& e) {
      retry_at_ns_ = now_ns + delay_ns_;
      delay_ns_ = std::min(delay_ns_ * 2, max_delay_ns_);
      return e.what();
    }
  }

 private:
  std::int64_t first_delay_ns_;
  std::int64_t max_delay_ns_;
  std::int64_t delay_ns_;
  std::int64_t retry_at_ns_ = 0;
};

}  // namespace stallscope
