#include "common/stop.h"

#include <signal.h>

#include <stdexcept>

namespace stallscope {
namespace {
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void on_signal(int sig) {
  if (g_stop.exchange(true)) {
    // Second signal: restore the default and let it kill.
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_stop_signal.store(sig);
}
}  // namespace

StopToken global_stop_token() noexcept {
  return StopToken(&g_stop);
}

StopToken either_of(StopToken a, StopToken b) {
  if (a.also_ != nullptr || b.also_ != nullptr) {
    throw std::invalid_argument("either_of: a token that already views two stop flags");
  }
  return StopToken(a.flag_ != nullptr ? a.flag_ : b.flag_, a.flag_ != nullptr ? b.flag_ : nullptr);
}

bool stop_requested() noexcept {
  return g_stop.load(std::memory_order_relaxed);
}
void request_stop() noexcept {
  g_stop.store(true);
}
void request_stop_on_broken_pipe() noexcept {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, SIGPIPE);
  g_stop.store(true);
}
void reset_stop() noexcept {
  g_stop.store(false);
  g_stop_signal.store(0);
}
int stop_signal() noexcept {
  return g_stop_signal.load();
}

const char* stop_signal_name() noexcept {
  switch (stop_signal()) {
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGPIPE:
      return "broken pipe (standard output or error closed)";
    default:
      return "SIGINT";
  }
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  // A file-size limit (ulimit -f) then fails the write with EFBIG, which
  // the writer reports as any write error, instead of killing the process.
  signal(SIGXFSZ, SIG_IGN);
  // A reader that went away (`run … | head -1`) then fails the write with
  // EPIPE, which ends the run as SIGINT does, instead of killing it.
  signal(SIGPIPE, SIG_IGN);
}

}  // namespace stallscope
