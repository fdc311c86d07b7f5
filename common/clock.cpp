#include "common/clock.h"

#include <time.h>

#include "common/units.h"
namespace stallscope {
namespace {
std::int64_t read_clock(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * common::kNsPerS + ts.tv_nsec;
}
}  // namespace

std::int64_t wall_now_ns() noexcept {
  return read_clock(CLOCK_REALTIME);
}
std::int64_t mono_now_ns() noexcept {
  return read_clock(CLOCK_MONOTONIC);
}
std::int64_t thread_cpu_ns() noexcept {
  return read_clock(CLOCK_THREAD_CPUTIME_ID);
}
std::int64_t process_cpu_ns() noexcept {
  return read_clock(CLOCK_PROCESS_CPUTIME_ID);
}

}  // namespace stallscope
