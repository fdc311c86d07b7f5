// The time accounting (Accounting in correlate.h) of each window and of the
// whole run, from what the passes accumulated, and the windows' other
// figures: host CPU shares, top wait event, perturbation, and the signals
// the stall rules compare.
#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "common/units.h"
#include "correlate/format.h"
#include "correlate/kernel_sleep.h"
#include "correlate/passes.h"

namespace stallscope::correlate::detail {
namespace {

// Backends in D state while serving the queries; what ASH did not already
// count as an IO wait is a part of its own, split by wchan.
void add_d_state(const WindowAcc& a, const Facts& f, Accounting& acc) {
  std::int64_t d_rows = 0;
  for (const auto& [wchan, n] : a.query_d_wchan_rows) d_rows += n;
  acc.backend_d_state_ns = d_rows * f.sample_period_ns;
  if (a.d_counted_by_wchan_ns) {
    for (const auto& [wchan, ns] : *a.d_counted_by_wchan_ns)
      if (ns > 0) acc.server_d_state_by_wchan_ns.emplace_back(wchan, ns);
  } else if (d_rows > 0) {
    const auto io_it = a.ash_class_rows.find("IO");
    const auto io_ns = io_it == a.ash_class_rows.end() ? 0 : io_it->second * f.ash_period_ns;
    const auto counted = std::max<std::int64_t>(0, acc.backend_d_state_ns - io_ns);
    for (const auto& [wchan, n] : a.query_d_wchan_rows) {
      const auto ns = static_cast<std::int64_t>(static_cast<__int128>(counted) * n / d_rows);
      if (ns > 0) acc.server_d_state_by_wchan_ns.emplace_back(wchan, ns);
    }
  }
  std::stable_sort(acc.server_d_state_by_wchan_ns.begin(), acc.server_d_state_by_wchan_ns.end(),
                   [](auto& x, auto& y) { return x.second > y.second; });
  for (const auto& [wchan, ns] : acc.server_d_state_by_wchan_ns) acc.server_d_state_ns += ns;
}

// Trims the measured parts to the query time. The driver's CPU and run
// delay go first, in proportion, up to their share that fell between queries
// (taken as the clients' idle share): they are measured per thread over the
// whole span, and some of them fall between queries (handling an answer,
// timers, waking from \sleep or the -R schedule), outside query time. Then
// all measured parts, in proportion; the schedule lag and the time of lost
// connections are exact and kept.
void trim_to_query_time(Accounting& acc) {
  std::int64_t sum_ns = 0;
  for (const auto& p : acc.parts) sum_ns += p.time_ns;
  acc.excess_ns = std::max<std::int64_t>(0, sum_ns - acc.query_ns);
  auto over = acc.excess_ns;
  if (over == 0) return;
  // The driver's share of each part.
  auto driver_ns = [&](const AccountingPart& p) -> std::int64_t {
    if (p.kind() == Part::driver_cpu) return p.time_ns;
    if (p.kind() == Part::run_queue && p.host.empty())
      return std::min(p.time_ns, acc.driver_run_delay_ns);
    if (p.kind() == Part::client_run_queue) return p.time_ns;
    return 0;
  };
  std::int64_t driver_total_ns = 0;
  for (const auto& p : acc.parts) driver_total_ns += driver_ns(p);
  // At most their share that fell between queries, taken as the clients'
  // idle share (a closed loop has almost none; think time, most).
  const auto between_ns =
      static_cast<std::int64_t>(double(driver_total_ns) * (1 - acc.client_busy_share));
  if (between_ns > 0) {
    const auto cut_total = std::min(over, between_ns);
    std::int64_t cut_sum = 0;
    for (auto& p : acc.parts) {
      const auto cut = static_cast<std::int64_t>(static_cast<__int128>(driver_ns(p)) * cut_total /
                                                 driver_total_ns);
      p.time_ns -= cut;
      cut_sum += cut;
    }
    over -= cut_sum;
  }
  if (over <= 0) return;
  const auto exact = [](const AccountingPart& p) {
    return p.kind() == Part::schedule_lag || p.kind() == Part::connection_lost;
  };
  std::int64_t scalable_ns = 0;
  for (const auto& p : acc.parts)
    if (!exact(p)) scalable_ns += p.time_ns;
  if (scalable_ns <= 0) return;
  const auto keep_ns = std::max<std::int64_t>(0, scalable_ns - over);
  std::int64_t kept_ns = 0;
  AccountingPart* largest = nullptr;
  for (auto& p : acc.parts) {
    if (exact(p)) continue;
    p.time_ns = static_cast<std::int64_t>(static_cast<__int128>(p.time_ns) * keep_ns / scalable_ns);
    kept_ns += p.time_ns;
    if (!largest || p.time_ns > largest->time_ns) largest = &p;
  }
  if (largest) largest->time_ns += keep_ns - kept_ns;  // rounding
}

// After trimming, the figures the finding rules read are the parts' (so a
// finding never claims more than the accounting shows).
void take_trimmed_parts(Accounting& acc) {
  if (acc.excess_ns == 0) return;
  auto trimmed = [&](Part part, std::string_view key, std::int64_t& field) {
    const auto id = part_id(part, key);
    for (const auto& p : acc.parts)
      if (p.name == id) field = p.time_ns;
  };
  auto trimmed_list = [&](Part part, std::vector<std::pair<std::string, std::int64_t>>& list,
                          std::int64_t& total) {
    total = 0;
    for (auto& [key, ns] : list) {
      trimmed(part, key, ns);
      total += ns;
    }
  };
  const auto driver_delay_before = acc.driver_run_delay_ns;
  const auto run_delay_before = acc.run_delay_ns;
  trimmed(Part::driver_cpu, {}, acc.driver_cpu_ns);
  trimmed_list(Part::path_cpu, acc.path_cpu_by_comm_ns, acc.path_cpu_ns);
  if (acc.path_wait_ns) trimmed(Part::path_wait, kPoolerName, *acc.path_wait_ns);
  trimmed(Part::server_cpu, {}, acc.server_cpu_ns);
  trimmed_list(Part::server_wait, acc.server_wait_by_class_ns, acc.server_wait_ns);
  trimmed_list(Part::server_d_state, acc.server_d_state_by_wchan_ns, acc.server_d_state_ns);
  trimmed_list(Part::kernel_wait, acc.kernel_wait_by_wchan_ns, acc.kernel_wait_ns);
  std::int64_t server_delay = run_delay_before - driver_delay_before;
  trimmed(Part::client_run_queue, {}, acc.driver_run_delay_ns);
  trimmed(Part::run_queue, {}, server_delay);
  for (const auto& p : acc.parts) {
    if (p.kind() == Part::run_queue && p.host.empty()) {
      // One part for both: the driver's share was cut first.
      const auto cut = run_delay_before - p.time_ns;
      acc.driver_run_delay_ns = std::max<std::int64_t>(0, driver_delay_before - cut);
      acc.run_delay_ns = p.time_ns;
      return;
    }
  }
  acc.run_delay_ns = server_delay + acc.driver_run_delay_ns;
}

// acc.parts in display order (Accounting in correlate.h), trimmed to the
// query time, with the remainder.
void add_parts(const Facts& f, bool pair, Accounting& acc) {
  const bool cpu_known = !acc.cannot_account;
  auto part = [&](Part kind, std::string_view key, std::int64_t ns, const char* host) {
    acc.parts.push_back(
        {.name = part_id(kind, key), .time_ns = ns, .share = 0.0, .host = pair ? host : ""});
  };
  // Client + server: the driver's figures come from the client pass.
  if (cpu_known || pair) part(Part::driver_cpu, {}, acc.driver_cpu_ns, "client");
  // Path processes are sampled in the server file; pooler waits are polled
  // by the run (its file).
  if (cpu_known) {
    for (const auto& [comm, ns] : acc.path_cpu_by_comm_ns) part(Part::path_cpu, comm, ns, "server");
  }
  if (acc.path_wait_ns) part(Part::path_wait, kPoolerName, *acc.path_wait_ns, "client");
  // Without backend processes server CPU is the ASH estimate, still known.
  if (cpu_known || (!f.backends_on_host && f.ash_available))
    part(Part::server_cpu, {}, acc.server_cpu_ns, "server");
  for (const auto& [cls, ns] : acc.server_wait_by_class_ns)
    part(Part::server_wait, cls, ns, "server");
  for (const auto& [wchan, ns] : acc.server_d_state_by_wchan_ns)
    part(Part::server_d_state, wchan, ns, "server");
  for (const auto& [wchan, ns] : acc.kernel_wait_by_wchan_ns)
    part(Part::kernel_wait, wchan, ns, "server");
  if (pair) {
    if (cpu_known) part(Part::run_queue, {}, acc.run_delay_ns - acc.driver_run_delay_ns, "server");
    part(Part::client_run_queue, {}, acc.driver_run_delay_ns, "client");
  } else if (cpu_known) {
    part(Part::run_queue, {}, acc.run_delay_ns, "");
  }
  if (acc.connection_lost_ns > 0) part(Part::connection_lost, {}, acc.connection_lost_ns, "client");
  if (acc.schedule_lag_ns > 0) part(Part::schedule_lag, {}, acc.schedule_lag_ns, "client");
  trim_to_query_time(acc);
  take_trimmed_parts(acc);
  std::int64_t sum_ns = 0;
  for (const auto& p : acc.parts) sum_ns += p.time_ns;
  if (cpu_known) {
    acc.remainder_ns = std::max<std::int64_t>(0, acc.query_ns - sum_ns);
    part(Part::remainder, {}, acc.remainder_ns, "");
  } else {
    // What cannot be split is a part of its own, so the parts still add up.
    part(Part::unaccounted, {}, std::max<std::int64_t>(0, acc.query_ns - sum_ns), "");
  }
  for (auto& p : acc.parts)
    p.share = acc.query_ns > 0 ? double(p.time_ns) / double(acc.query_ns) : 0.0;
}

// Adds a window's accumulators into the whole run's: the host totals and the
// fields make_accounting reads (the stall signals stay per window; the D-state
// time counted per window is added by account_window).
void add_into(WindowAcc& total, const WindowAcc& a) {
  total.host.busy_ns += a.host.busy_ns;
  total.host.idle_ns += a.host.idle_ns;
  total.host.iowait_ns += a.host.iowait_ns;
  total.host.steal_ns += a.host.steal_ns;
  total.host.total_ns += a.host.total_ns;
  total.host.cpu_rows += a.host.cpu_rows;
  total.host.procs_running_max = std::max(total.host.procs_running_max, a.host.procs_running_max);
  total.host.processes_d_state_max =
      std::max(total.host.processes_d_state_max, a.host.processes_d_state_max);
  total.sampler_cpu_ns += a.sampler_cpu_ns;
  total.driver_cpu_ns += a.driver_cpu_ns;
  total.server_cpu_ns += a.server_cpu_ns;
  for (const auto& [k, v] : a.path_cpu_ns) total.path_cpu_ns[k] += v;
  total.path_wait_ns += a.path_wait_ns;
  total.connection_lost_ns += a.connection_lost_ns;
  total.run_delay_ns += a.run_delay_ns;
  total.driver_run_delay_ns += a.driver_run_delay_ns;
  total.cpu_delta_rows += a.cpu_delta_rows;
  for (const auto& [k, v] : a.query_d_wchan_rows) total.query_d_wchan_rows[k] += v;
  total.ash_cpu_rows += a.ash_cpu_rows;
  for (const auto& [k, v] : a.ash_class_rows) total.ash_class_rows[k] += v;
  for (const auto& [k, v] : a.kernel_sleep_ns) total.kernel_sleep_ns[k] += v;
  total.ash_blind_ns += a.ash_blind_ns;
}

std::int64_t rows_of(const std::map<std::string, std::int64_t>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? std::int64_t{0} : it->second;
}

// The window's host CPU shares, run-queue maxima and steal share (f).
void fill_host_figures(const WindowAcc& a, Window& w, double& steal_share) {
  if (a.host.cpu_rows > 0) {
    w.cpu_busy_pct = pct(a.host.busy_ns, a.host.total_ns);
    w.cpu_idle_pct = pct(a.host.idle_ns, a.host.total_ns);
    w.cpu_iowait_pct = pct(a.host.iowait_ns, a.host.total_ns);
    w.cpu_steal_pct = pct(a.host.steal_ns, a.host.total_ns);
    auto demand = a.host.busy_ns + a.host.steal_ns;
    steal_share = demand > 0 ? double(a.host.steal_ns) / double(demand) : 0;
  }
  if (a.host.procs_running_max > 0 || a.host.cpu_rows > 0) {
    w.procs_running_max = a.host.procs_running_max;
    w.processes_d_state_max = a.host.processes_d_state_max;
  }
}

// The window's most frequent ASH state, and whether the sampler's own CPU
// there exceeded kPerturbationMaxCoreShare of a core.
void fill_wait_and_perturbation(const WindowAcc& a, Window& w) {
  std::int64_t best = 0;
  for (const auto& [label, rows] : a.ash_event_rows) {
    if (rows > best) {
      best = rows;
      w.top_wait_event = label;
    }
  }
  w.top_wait_event_samples = best;
  if (w.end_ns > w.start_ns) {
    w.sampler_core_share = double(a.sampler_cpu_ns) / double(w.end_ns - w.start_ns);
    w.perturbed = *w.sampler_core_share > kPerturbationMaxCoreShare;
  }
}

// Query-path run delay from a CPU quota: measured through the cgroup where
// the sampler recorded it, else inferred (runnable while idle).
std::int64_t throttled_ns(const WindowAcc& a, const Facts& f) {
  if (f.cgroup_data) return a.throttled_delay_ns;
  if (a.host.cpu_rows > 0 && a.host.busy_share() < kThrottleMaxHostBusyShare) {
    return a.run_delay_ns;
  }
  return 0;
}

// What the stall rules compare for this window (WindowSignals, detail.h).
WindowSignals window_signals(const WindowAcc& a, const Facts& f, const Window& w,
                             std::int64_t throttled, double steal_share) {
  WindowSignals g;
  g.service_ns = w.accounting ? service_ns(*w.accounting) : w.query_time_ns;
  g.backend_d_rows = a.backend_d_rows;
  for (const auto& [wchan, n] : a.backend_d_wchan_rows) {
    if (n > g.top_d_wchan_rows) std::tie(g.top_d_wchan, g.top_d_wchan_rows) = std::tie(wchan, n);
  }
  g.checkpointer_d_rows = a.checkpointer_d_rows;
  g.checkpointer_write_bytes = a.checkpointer_write_bytes;
  const auto walwrite = rows_of(a.ash_event_rows, "LWLock:WALWrite");
  const bool io_evidence = rows_of(f.ash_class_rows, "IO") > 0 || f.backend_d_rows > 0;
  g.io_rows = rows_of(a.ash_class_rows, "IO") + (io_evidence ? walwrite : 0);
  g.lock_rows = rows_of(a.ash_class_rows, "Lock");
  for (const auto& [label, n] : a.ash_event_rows) {
    if (is_replication_wait(label)) g.replication_rows += n;
  }
  g.lwlock_rows = rows_of(a.ash_class_rows, "LWLock") - (io_evidence ? walwrite : 0);
  for (const auto& [pid, n] : a.blocking_pid_rows) {
    if (n > g.top_blocking_pid_rows)
      std::tie(g.top_blocking_pid, g.top_blocking_pid_rows) = std::tie(pid, n);
  }
  g.throttled_ns = throttled;
  g.run_delay_ns = std::max<std::int64_t>(0, a.run_delay_ns - throttled);
  g.steal_share = steal_share;
  g.ash_period_ns = f.ash_period_ns;
  g.sample_period_ns = f.sample_period_ns;
  // Backends asleep outside wait events (kernel_sleep.cpp), the time ASH
  // was blind.
  std::int64_t top_sleep_ns = 0;
  for (const auto& [wchan, ns] : a.kernel_sleep_ns) {
    g.kernel_sleep_ns += ns;
    if (ns > top_sleep_ns) std::tie(g.top_sleep_wchan, top_sleep_ns) = std::tie(wchan, ns);
  }
  g.ash_blind_ns = a.ash_blind_ns;
  g.window_ns = w.end_ns - w.start_ns;
  return g;
}

// Client + server: the driver ran on the client host; its figures for
// window i come from the client file.
void apply_client_driver(const ClientDriver& client, std::size_t i, WindowAcc& a) {
  if (client.cpu_ns && i < client.cpu_ns->size()) {
    // make_accounting subtracts this file's sampler CPU, so add it back.
    a.driver_cpu_ns = (*client.cpu_ns)[i] + a.sampler_cpu_ns;
  }
  if (client.run_delay_ns && i < client.run_delay_ns->size()) {
    a.driver_run_delay_ns = (*client.run_delay_ns)[i];
    a.run_delay_ns += a.driver_run_delay_ns;
  }
}

// With queries: the window's accounting, its D-state time counted into the
// whole run's, and its wait classes as shares of its service time (f);
// without: the wait classes' row counts.
void account_window(const WindowAcc& a, Window& w, std::size_t i, Facts& f, int clients, bool pair,
                    const RunSummary& report_run, WindowAcc& total) {
  if (!f.has_queries) {
    for (const auto& [cls, rows] : a.ash_class_rows) f.window_wait_share[i][cls] = double(rows);
    return;
  }
  w.accounting = make_accounting({clients, w.end_ns - w.start_ns, w.query_time_ns,
                                  w.schedule_lag_ns, rate_not_kept(report_run)},
                                 a, f, pair);
  auto& counted = total.d_counted_by_wchan_ns;
  if (!counted) counted.emplace();
  for (const auto& [wchan, ns] : w.accounting->server_d_state_by_wchan_ns) (*counted)[wchan] += ns;
  const auto service_ns = detail::service_ns(*w.accounting);
  for (const auto& [cls, ns] : w.accounting->server_wait_by_class_ns) {
    f.window_wait_share[i][cls] = service_ns > 0 ? double(ns) / double(service_ns) : 0;
  }
}
}  // namespace

Accounting make_accounting(const QueryTime& time, const WindowAcc& a, const Facts& f, bool pair) {
  Accounting acc;
  acc.clients = time.clients;
  acc.wall_ns = time.wall_ns;
  acc.client_ns = static_cast<std::int64_t>(time.clients) * time.wall_ns;
  acc.query_ns = time.query_ns;
  acc.schedule_lag_ns = std::min(time.schedule_lag_ns, time.query_ns);
  acc.lag_apportioned = time.apportion_lag && acc.schedule_lag_ns > 0;
  acc.idle_ns = std::max<std::int64_t>(0, acc.client_ns - acc.query_ns);
  acc.connection_lost_ns =
      std::clamp<std::int64_t>(a.connection_lost_ns, 0, acc.query_ns - acc.schedule_lag_ns);
  acc.client_busy_share =
      acc.client_ns > 0 ? std::min(1.0, double(acc.query_ns) / double(acc.client_ns)) : 0.0;
  acc.sampler_cpu_ns = a.sampler_cpu_ns;
  // Without per-thread rows the stallscope process's CPU includes the
  // sampler thread's, which the sampler measured itself.
  acc.driver_cpu_ns = f.driver_cpu_from_threads
                          ? a.driver_cpu_ns
                          : std::max<std::int64_t>(0, a.driver_cpu_ns - a.sampler_cpu_ns);
  acc.server_cpu_ns = f.backends_on_host ? a.server_cpu_ns : a.ash_cpu_rows * f.ash_period_ns;
  for (const auto& [comm, ns] : a.path_cpu_ns) {
    acc.path_cpu_by_comm_ns.emplace_back(comm, ns);
    acc.path_cpu_ns += ns;
  }
  std::stable_sort(acc.path_cpu_by_comm_ns.begin(), acc.path_cpu_by_comm_ns.end(),
                   [](auto& x, auto& y) { return x.second > y.second; });
  for (const auto& [cls, rows] : a.ash_class_rows) {
    acc.server_wait_by_class_ns.emplace_back(cls, rows * f.ash_period_ns);
    acc.server_wait_ns += rows * f.ash_period_ns;
  }
  std::stable_sort(acc.server_wait_by_class_ns.begin(), acc.server_wait_by_class_ns.end(),
                   [](auto& x, auto& y) { return x.second > y.second; });
  acc.run_delay_ns = a.run_delay_ns;
  acc.driver_run_delay_ns = a.driver_run_delay_ns;
  add_d_state(a, f, acc);
  account_kernel_sleep(a, acc);
  if (f.pooler.available) acc.path_wait_ns = a.path_wait_ns;
  // No process CPU delta covers this span (e.g. --hz 0.1 on a short run):
  // the CPU and run-queue parts measured from this file's processes, and so
  // the remainder, cannot be accounted — left out rather than shown as 0.
  if (a.cpu_delta_rows == 0) {
    acc.cannot_account =
        a.host.cpu_rows == 0 && !f.ash_available
            ? std::string(
                  "the file holds no host, process or ASH samples for this span (an "
                  "imported pgbench log: record beside the benchmark and explain the "
                  "log with that file)")
            : fmt::format(
                  "no process sample with a CPU delta covers this span (samples every "
                  "{:.1f} s); sample faster (--hz) or run longer",
                  double(f.sample_period_ns) / common::kNsPerSDouble);
  }
  add_parts(f, pair, acc);
  return acc;
}

WindowSums sum_windows(Report& report, std::vector<WindowAcc>& acc, Facts& f, int clients,
                       const ClientDriver& client_driver) {
  const bool pair = client_driver.cpu_ns.has_value();
  const auto n = report.windows.size();
  WindowSums sums;
  f.window_wait_share.resize(n);
  f.window_steal_share.resize(n);
  f.window_throttle_share.resize(n);
  sums.signals.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto& w = report.windows[i];
    apply_client_driver(client_driver, i, acc[i]);
    acc[i].connection_lost_ns = w.connection_lost_ns;
    const auto& a = acc[i];
    add_into(sums.total, a);
    fill_host_figures(a, w, f.window_steal_share[i]);
    fill_wait_and_perturbation(a, w);
    w.ash_blind_ns = a.ash_blind_ns;
    if (w.perturbed) ++sums.perturbed_windows;

    const auto throttled = throttled_ns(a, f);
    f.throttled_run_delay_ns += throttled;
    account_window(a, w, i, f, clients, pair, report.run, sums.total);
    sums.signals[i] = window_signals(a, f, w, throttled, f.window_steal_share[i]);
    sums.query_ns += w.query_time_ns;
    sums.schedule_lag_ns += w.schedule_lag_ns;
    if (const auto service_ns = sums.signals[i].service_ns; f.has_queries && service_ns > 0) {
      f.window_throttle_share[i] = double(throttled) / double(service_ns);
    }
  }
  return sums;
}
}  // namespace stallscope::correlate::detail
