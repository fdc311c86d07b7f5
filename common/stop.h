// The one piece of global mutable state: a stop flag set by SIGINT/SIGTERM.
#pragma once

#include <atomic>

namespace stallscope {

// True once SIGINT or SIGTERM arrived (after install_stop_handlers) or
// request_stop() was called. Lock-free; safe to poll from any thread.
bool stop_requested() noexcept;
// Sets the flag; async-signal-safe.
void request_stop() noexcept;
// Clears the flag (tests; the start of a new run in one process).
void reset_stop() noexcept;
// Installs SIGINT and SIGTERM handlers that call request_stop(); a second
// signal of either kind restores the default action, so it kills.
void install_stop_handlers();
// Signal number that set the flag, 0 if none (or request_stop() was used).
int stop_signal() noexcept;

}  // namespace stallscope
