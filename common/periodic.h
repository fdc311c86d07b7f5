// PeriodicThread — the tick loop of the samplers and the progress printer: a
// named thread that calls `tick` at absolute CLOCK_MONOTONIC deadlines (no
// drift), skips to the next deadline still ahead after an overrun, and sleeps
// on a condition variable so stop() is prompt.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace stallscope {

class PeriodicThread {
 public:
  PeriodicThread() = default;
  ~PeriodicThread() { stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Starts the thread (named `name`, see common/thread_name.h); the first
  // tick runs after `first_delay_ns` (0: at once), then one every
  // `period_ns`. `tick` must not throw: an exception that escapes it ends the
  // loop (stop() still joins). No-op when already running.
  void start(const char* name, std::int64_t period_ns, std::function<void()> tick,
             std::int64_t first_delay_ns = 0);
  // Asks the loop to end after the tick in progress, and joins. Idempotent.
  void stop();
  bool running() const noexcept { return thread_.joinable(); }

 private:
  void loop(std::int64_t period_ns, std::int64_t first_delay_ns);

  std::function<void()> tick_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace stallscope
