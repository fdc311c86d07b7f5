// Stopping a run: one global stop flag set by SIGINT/SIGTERM (the one piece
// of global mutable state), and StopToken, the read-only view of a stop flag
// that long-running loops (the driver) poll, so a caller — a test, or
// tools/run_command.cpp with global_stop_token() — decides what stops them.
//
//   StopSource stop;                      // e.g. in a test
//   driver.run(stop.token());             // returns soon after …
//   stop.request_stop();                  // … this, from any thread
//
// Why not std::stop_token: std::stop_source::request_stop() is not
// async-signal-safe (libstdc++ takes a lock to run the stop callbacks), so a
// signal handler cannot call it. A StopToken only points to a lock-free
// std::atomic<bool>: the signal handler stores to the global one, pollers
// load it; nothing else happens on either side.
#pragma once

#include <atomic>

namespace stallscope {

// Whether a stop was requested, read from one std::atomic<bool> (relaxed),
// or from either of two (either_of below). Default-constructed: never stops.
// Copyable; the flags it views (a StopSource, or the global flag) must
// outlive it.
class StopToken {
 public:
  StopToken() = default;
  bool stop_requested() const noexcept {
    return (flag_ != nullptr && flag_->load(std::memory_order_relaxed)) ||
           (also_ != nullptr && also_->load(std::memory_order_relaxed));
  }

 private:
  friend class StopSource;
  friend StopToken global_stop_token() noexcept;
  friend StopToken either_of(StopToken a, StopToken b);
  explicit StopToken(const std::atomic<bool>* flag,
                     const std::atomic<bool>* also = nullptr) noexcept
      : flag_(flag), also_(also) {}
  const std::atomic<bool>* flag_ = nullptr;
  const std::atomic<bool>* also_ = nullptr;
};

// A token that reports a stop once `a` or `b` does, e.g. a run that ends on
// SIGINT/SIGTERM or at the first failed commit of its file:
//   driver.run(either_of(global_stop_token(), writer.failure_token()));
// Each of `a` and `b` may view at most one flag (a StopSource's token, the
// global one, or a default token); throws std::invalid_argument otherwise.
StopToken either_of(StopToken a, StopToken b);

// Owns a stop flag of its own (not the global one). Neither copyable nor
// movable: its tokens point to it.
class StopSource {
 public:
  StopSource() = default;
  StopSource(const StopSource&) = delete;
  StopSource& operator=(const StopSource&) = delete;
  StopToken token() const noexcept { return StopToken(&flag_); }
  // Async-signal-safe (one store to a lock-free atomic).
  void request_stop() noexcept { flag_.store(true); }
  bool stop_requested() const noexcept { return flag_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> flag_{false};
  static_assert(std::atomic<bool>::is_always_lock_free);
};

// A token whose state is the global flag below.
StopToken global_stop_token() noexcept;

// True once SIGINT, SIGTERM or SIGHUP arrived (after install_stop_handlers) or
// request_stop() was called. Lock-free; safe to poll from any thread.
bool stop_requested() noexcept;
// Sets the flag; async-signal-safe.
void request_stop() noexcept;
// Sets the flag as a signal does, with SIGPIPE as its signal, unless a
// signal set it first: standard output or error lost its reader (a write
// failed with EPIPE, or common::standard_output_closed()). Async-signal-safe.
void request_stop_on_broken_pipe() noexcept;
// Clears the flag (tests; the start of a new run in one process).
void reset_stop() noexcept;
// Installs SIGINT, SIGTERM and SIGHUP (a closed terminal or ssh session)
// handlers that call request_stop(); a second signal of any of them
// restores the default action, so it kills. Ignores SIGXFSZ, so a write
// past a file-size limit fails (EFBIG) instead of killing the process, and
// SIGPIPE, so a write to a pipe whose reader went away fails (EPIPE) and the
// run ends through request_stop_on_broken_pipe() instead of being killed
// (a child started after this must get both back: an ignored signal stays
// ignored across exec).
void install_stop_handlers();
// Signal number that set the flag, 0 if none (or request_stop() was used).
int stop_signal() noexcept;
// "SIGTERM", "SIGHUP", "broken pipe (standard output or error closed)"
// (request_stop_on_broken_pipe), or "SIGINT" (also when request_stop() was
// used): the run's end_reason when a signal ended it.
const char* stop_signal_name() noexcept;

}  // namespace stallscope
