// Backends asleep in the kernel outside any wait event: PostgreSQL shows them
// active with no wait event (as if on CPU), while the host sampler sees them
// in state S on a wait channel that is neither the latch, a futex, storage
// nor memory — writing to a full pipe (their stderr with logging_collector
// off), to a full socket (syslog), and the like. Their time is the
// accounting's kernel_wait:<wchan> parts, instead of falling into the
// remainder (read as round trips) or, without schedstat, into server CPU.
#include "correlate/kernel_sleep.h"

#include <algorithm>

#include <fmt/format.h>

namespace stallscope::correlate::detail {
namespace {

bool has(std::string_view w, std::string_view part) {
  return w.find(part) != std::string_view::npos;
}

}  // namespace

void add_kernel_sleep(const WindowIndex& windows, std::int64_t t,
                      std::optional<std::int64_t> span_ns, std::optional<std::int64_t> cpu_ns,
                      std::int64_t sample_period_ns, std::string_view state,
                      std::optional<std::string_view> wchan, std::vector<WindowAcc>& acc) {
  if (state != "S" || !wchan || wchan_family(*wchan) != WchanFamily::other) return;
  // Asleep through the whole span when it did not run in it; else seen
  // asleep at the tick, one period's worth.
  const bool slept_throughout = cpu_ns && *cpu_ns == 0 && span_ns && *span_ns > 0;
  const auto ns = slept_throughout ? *span_ns : sample_period_ns;
  if (ns <= 0) return;
  const std::string key(*wchan);
  spread(windows, t, ns, ns,
         [&](std::size_t w, std::int64_t v) { acc[w].kernel_sleep_ns[key] += v; });
}

void account_kernel_sleep(const WindowAcc& a, Accounting& acc) {
  for (const auto& [wchan, ns] : a.kernel_sleep_ns) {
    if (ns <= 0) continue;
    acc.kernel_wait_by_wchan_ns.emplace_back(wchan, ns);
    acc.kernel_wait_ns += ns;
  }
  std::stable_sort(acc.kernel_wait_by_wchan_ns.begin(), acc.kernel_wait_by_wchan_ns.end(),
                   [](auto& x, auto& y) { return x.second > y.second; });
}

std::string wchan_meaning(std::string_view w, std::string_view role) {
  const bool backend = role == "backend";
  if (has(w, "pipe_write") || w == "pipe_wait") {
    // A backend writes to a pipe to log: its stderr (logging_collector
    // off) or the logging collector's pipe; else COPY … TO PROGRAM.
    return backend ? "a full pipe: their log output (stderr, or the logging collector's pipe) is "
                     "not read fast enough"
                   : "a full pipe: its reader does not keep up";
  }
  if (has(w, "sk_stream_wait_memory")) return "a full TCP send buffer: the peer does not read";
  if (has(w, "sock_alloc_send") || has(w, "sock_wait_for_wmem") || has(w, "unix_wait_for_peer")) {
    return backend ? "a full socket send buffer: syslog (/dev/log, journald) or another "
                     "Unix-socket reader falling behind"
                   : "a full socket send buffer: its reader falls behind";
  }
  if (has(w, "tty_write") || has(w, "n_tty")) return "a terminal that does not keep up";
  if (has(w, "futex")) return "a futex: a lock or condition inside the process";
  if (has(w, "do_signal_stop")) return "stopped by a signal";
  if (has(w, "wait_for_completion")) return "a kernel completion (a device, a flush)";
  if (has(w, "fuse")) return "a FUSE file system's daemon";
  if (has(w, "msleep") || has(w, "schedule_timeout")) return "a timed sleep in the kernel";
  return "";
}

std::string sleep_culprit(std::string_view who, std::string_view role, std::string_view wchan) {
  const auto meaning = wchan_meaning(wchan, role);
  return fmt::format("{} asleep in {}{}", who, wchan,
                     meaning.empty() ? std::string() : " (" + meaning + ")");
}

std::string kernel_wait_culprit(const Accounting* acc, const Facts& f,
                                const std::map<std::string, std::int64_t>& ash_events) {
  std::string culprit;
  std::int64_t best_ns = 0;
  if (acc && !acc->kernel_wait_by_wchan_ns.empty()) {
    const auto& [wchan, ns] = acc->kernel_wait_by_wchan_ns.front();
    best_ns = ns;
    culprit = sleep_culprit("backends", "backend", wchan);
  }
  for (const auto& [key, rows] : f.kernel.other_rows_by_wait) {
    const auto ns = rows * f.sample_period_ns;
    if (ns <= best_ns) continue;
    // "role wchan": backend, driver or pooler:<comm>.
    const auto space = key.find(' ');
    const std::string role = key.substr(0, space);
    const std::string wchan = space == std::string::npos ? "" : key.substr(space + 1);
    const std::string who = role == "backend"  ? "backends"
                            : role == "driver" ? "the driver"
                                               : role.substr(role.find(':') + 1);
    best_ns = ns;
    culprit = sleep_culprit(who, role, wchan);
  }
  for (const auto& [event, rows] : ash_events) {
    const auto ns = rows * f.ash_period_ns;
    if (ns <= best_ns) continue;
    best_ns = ns;
    culprit = fmt::format("backends waiting on {}", event);
  }
  return culprit;
}

}  // namespace stallscope::correlate::detail
