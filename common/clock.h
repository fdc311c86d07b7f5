// Clocks. Every stored timestamp is nanoseconds since the Unix epoch
// (CLOCK_REALTIME); every duration is measured on CLOCK_MONOTONIC.
#pragma once

#include <cstdint>

namespace stallscope {

// Wall clock, ns since the Unix epoch; source: clock_gettime(CLOCK_REALTIME).
std::int64_t wall_now_ns() noexcept;
// Monotonic clock, ns since an arbitrary point; source: CLOCK_MONOTONIC.
std::int64_t mono_now_ns() noexcept;
// CPU time consumed by the calling thread, ns; source: CLOCK_THREAD_CPUTIME_ID.
std::int64_t thread_cpu_ns() noexcept;
// CPU time consumed by the whole process, ns; source: CLOCK_PROCESS_CPUTIME_ID.
std::int64_t process_cpu_ns() noexcept;

}  // namespace stallscope
