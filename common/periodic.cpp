#include "common/periodic.h"

#include <algorithm>
#include <chrono>

#include "common/clock.h"
#include "common/thread_name.h"

namespace stallscope {
namespace {
std::chrono::steady_clock::time_point steady_at(std::int64_t mono_ns) {
  // libstdc++'s steady_clock is CLOCK_MONOTONIC, the clock of mono_now_ns().
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(mono_ns));
}
}  // namespace

void PeriodicThread::start(const char* name, std::int64_t period_ns, std::function<void()> tick,
                           std::int64_t first_delay_ns) {
  if (thread_.joinable()) return;
  tick_ = std::move(tick);
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  period_ns = std::max<std::int64_t>(1, period_ns);
  thread_ = std::thread([this, name, period_ns, first_delay_ns] {
    set_thread_name(name);
    loop(period_ns, first_delay_ns);
  });
}

void PeriodicThread::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeriodicThread::loop(std::int64_t period_ns, std::int64_t first_delay_ns) {
  std::int64_t deadline_ns = mono_now_ns() + std::max<std::int64_t>(0, first_delay_ns);
  for (;;) {
    if (deadline_ns > mono_now_ns()) {
      std::unique_lock lock(mu_);
      if (cv_.wait_until(lock, steady_at(deadline_ns), [&] { return stopping_; })) return;
    }
    try {
      tick_();
    } catch (...) {
      // Only a throwing sink (or out of memory) gets here; no thread may
      // leak an exception, so the loop ends and stop() still joins.
      return;
    }
    deadline_ns += period_ns;
    const std::int64_t now_ns = mono_now_ns();
    if (now_ns >= deadline_ns) {  // overran: skip to the next deadline still ahead
      deadline_ns += (now_ns - deadline_ns) / period_ns * period_ns + period_ns;
    }
    std::lock_guard lock(mu_);
    if (stopping_) return;
  }
}

}  // namespace stallscope
