// StopWatchdog: bounds how long stopping can wait on a server that stopped
// answering. While it lives, after `grace_ns` it calls `fire` once, from a
// thread of its own, unless it is destroyed first (AshSampler::stop,
// PoolerSampler::stop, run's clock-offset probes; `fire` typically
// pg::abort_socket()s the connection a call is blocked on).
//
//   {
//     StopWatchdog watchdog(kSamplerStopGraceNs, [&] { abort the blocked poll });
//     thread.stop();  // joins; a poll blocked past the grace is aborted
//   }               // destroyed: `fire` never runs once it is gone
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>

namespace stallscope {

class StopWatchdog {
 public:
  StopWatchdog(std::int64_t grace_ns, std::function<void()> fire)
      : thread_([grace_ns, fire = std::move(fire)](std::stop_token done) {
          std::mutex mu;
          std::condition_variable_any cv;
          std::unique_lock lock(mu);
          cv.wait_for(lock, done, std::chrono::nanoseconds(grace_ns), [] { return false; });
          if (!done.stop_requested()) fire();
        }) {}

 private:
  std::jthread thread_;  // destroyed first: requests stop and joins
};

}  // namespace stallscope
