// Text formatting shared by the correlator's files (format.h).
#include "correlate/format.h"

#include <ctime>

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace stallscope::correlate::detail {

std::string share_pct_text(double share) {
  return fmt::format("{:.0f}%", 100 * share);
}

std::string utc_time_text(std::int64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / common::kNsPerS);
  return fmt::format("{:%Y-%m-%d %H:%M:%S} UTC", fmt::gmtime(t));
}

std::string epoch_seconds_text(std::int64_t ns) {
  return fmt::format("{:.3f}", double(ns) / common::kNsPerSDouble);
}

}  // namespace stallscope::correlate::detail
