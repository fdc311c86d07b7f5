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
void add_kernel_sleep(const WindowIndex& windows, std::int64_t t,
                      std::optional<std::int64_t> span_ns, std::optional<std::int64_t> cpu_ns,
                      std::int64_t sample_period_ns, std::string_view state,
                      std::optional<std::string_view> wchan, std::vector<WindowAcc>& acc) {
  if (state != "S" || !wchan || !held_on_query_path(wchan_family(*wchan))) return;
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

std::string sleep_culprit(std::string_view who, std::string_view role, std::string_view wchan) {
  const auto meaning = common::wchan_meaning(wchan, role == "backend");
  return meaning.empty() ? fmt::format("{} asleep in {}", who, wchan)
                         : fmt::format("{} asleep in {} ({})", who, wchan, meaning);
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
