// Unit constants: how many of the smaller unit one larger unit holds. Every
// duration and timestamp stallscope stores is an integer count of
// nanoseconds (common/clock.h); these turn them into the units people read,
// and back.
//
//   double ms = double(latency_ns) / common::kNsPerMs;
//   std::int64_t period_ns = common::kNsPerS / hz;
#pragma once

#include <cstdint>

namespace stallscope::common {

inline constexpr std::int64_t kNsPerUs = 1'000;
inline constexpr std::int64_t kNsPerMs = 1'000'000;
inline constexpr std::int64_t kNsPerS = 1'000'000'000;
inline constexpr std::int64_t kUsPerMs = 1'000;
inline constexpr std::int64_t kUsPerS = 1'000'000;
inline constexpr std::int64_t kMsPerS = 1'000;

// Floating-point twins, for rates and shares: `double(ns) / kNsPerSDouble`.
inline constexpr double kNsPerUsDouble = 1e3;
inline constexpr double kNsPerMsDouble = 1e6;
inline constexpr double kNsPerSDouble = 1e9;
inline constexpr double kMsPerSDouble = 1e3;

// A duration or time in ns as milliseconds, and as seconds.
constexpr double ms(std::int64_t ns) {
  return static_cast<double>(ns) / kNsPerMsDouble;
}
constexpr double seconds(std::int64_t ns) {
  return static_cast<double>(ns) / kNsPerSDouble;
}

// Sizes: /proc gives memory in KiB (meminfo) or pages (stat; the page size
// is sysconf(_SC_PAGESIZE)); stallscope stores bytes.
inline constexpr std::int64_t kBytesPerKiB = 1'024;
inline constexpr std::int64_t kBytesPerMiB = 1'024 * 1'024;

}  // namespace stallscope::common
