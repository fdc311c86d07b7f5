// The report's timelines and tables, binned on one grid (report.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "common/latency_histogram.h"
#include "common/units.h"
#include "report/detail.h"
#include "report/report.h"
#include "schema/ash_tick_readers.h"
#include "schema/fact_readers.h"
#include "schema/run_reader.h"
#include "schema/sample_readers.h"
#include "schema/timeline_readers.h"

namespace stallscope::report {
namespace {

// Per-bin latency percentiles need not the explain's 0.2 %: a power of two
// split in 16 (±3 %) keeps a bin's histogram at 7.5 KiB.
constexpr common::LatencyResolution kBinResolution{4, false};
// Processes named apart in the CPU-by-process chart; the rest are "other".
constexpr std::size_t kProcessChartNames = 6;

using common::ms;
using common::seconds;

using detail::keep;
using detail::series;

// Adds `amount`, measured over (end_ns − span_ns, end_ns], to the bins that
// span overlaps, in proportion to the overlap; without a span, to end_ns's bin.
// Bins a spread touched are marked in *covered when given (the others had
// no measurement: a gap, not 0).
void spread(const Grid& g, std::int64_t end_ns, std::int64_t span_ns, double amount,
            std::vector<double>& bins, std::vector<char>* covered = nullptr) {
  if (span_ns <= 0) {
    if (const auto b = g.bin_of(end_ns)) {
      bins[*b] += amount;
      if (covered) (*covered)[*b] = 1;
    }
    return;
  }
  const auto from_ns = end_ns - span_ns;
  const auto first = g.bin_of(std::max(from_ns, g.start_ns()));
  if (!first) return;
  for (int i = *first; i < g.bins(); ++i) {
    const auto bin_start = g.bin_start_ns(i);
    if (bin_start >= end_ns) break;
    const auto overlap = std::min(end_ns, g.bin_end_ns(i)) - std::max(from_ns, bin_start);
    if (overlap > 0) {
      bins[i] += amount * static_cast<double>(overlap) / static_cast<double>(span_ns);
      if (covered) (*covered)[i] = 1;
    }
  }
}

}  // namespace

std::optional<int> Grid::bin_of(std::int64_t t_ns) const {
  if (edges_ns.size() < 2 || t_ns < edges_ns.front() || t_ns >= edges_ns.back())
    return std::nullopt;
  const auto at = std::upper_bound(edges_ns.begin(), edges_ns.end(), t_ns);
  return static_cast<int>(at - edges_ns.begin()) - 1;
}

Grid grid_for(const correlate::Report& report, int max_bins) {
  std::int64_t from_ns = report.run.start_ns;
  std::int64_t to_ns = report.run.end_ns.value_or(report.run.start_ns + common::kNsPerS);
  if (!report.windows.empty()) {
    from_ns = report.windows.front().start_ns;
    to_ns = report.windows.back().end_ns;
  }
  const std::int64_t span_ns = std::max<std::int64_t>(to_ns - from_ns, common::kNsPerMs);
  const std::int64_t period_ns =
      report.run.hz > 0
          ? static_cast<std::int64_t>(std::llround(common::kNsPerSDouble / report.run.hz))
          : 100 * common::kNsPerMs;
  const std::int64_t per_bin_ns = (span_ns + max_bins - 1) / std::max(max_bins, 1);
  Grid g;
  g.bin_ns = std::max(period_ns, per_bin_ns);
  const auto coarse_bins = (span_ns + g.bin_ns - 1) / g.bin_ns;
  for (std::int64_t i = 0; i <= coarse_bins; ++i) g.edges_ns.push_back(from_ns + i * g.bin_ns);
  if (g.bin_ns <= 2 * period_ns || report.stalls.empty()) return g;

  // Regions of fine bins around the stalls, on overview edges, merged.
  std::vector<std::pair<std::int64_t, std::int64_t>> regions;
  const auto snap_down = [&](std::int64_t t) {
    return from_ns + std::clamp<std::int64_t>((t - from_ns) / g.bin_ns, 0, coarse_bins) * g.bin_ns;
  };
  const auto snap_up = [&](std::int64_t t) {
    return from_ns +
           std::clamp<std::int64_t>((t - from_ns + g.bin_ns - 1) / g.bin_ns, 0, coarse_bins) *
               g.bin_ns;
  };
  for (std::size_t k = 0; k < report.stalls.size() && k < std::size_t{Grid::kDetailStalls}; ++k) {
    const auto& s = report.stalls[k];
    const auto pad_ns = 3 * g.bin_ns + (s.end_ns - s.start_ns);
    const auto a = snap_down(s.start_ns - pad_ns), b = snap_up(s.end_ns + pad_ns);
    if (b <= a) continue;
    if (!regions.empty() && a <= regions.back().second) {
      regions.back().second = std::max(regions.back().second, b);
    } else {
      regions.emplace_back(a, b);
    }
  }
  std::vector<std::int64_t> edges;
  std::size_t r = 0;
  for (const auto e : g.edges_ns) {
    while (r < regions.size() && e > regions[r].second) ++r;
    const bool inside = r < regions.size() && e > regions[r].first && e < regions[r].second;
    if (!inside) edges.push_back(e);
  }
  for (const auto& [a, b] : regions) {
    const auto fine_ns =
        std::max(period_ns, (b - a + Grid::kDetailBinsPerStall - 1) / Grid::kDetailBinsPerStall);
    g.fine_bin_ns = g.fine_bin_ns ? std::min(g.fine_bin_ns, fine_ns) : fine_ns;
    for (auto t = a + fine_ns; t < b; t += fine_ns) edges.push_back(t);
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  g.edges_ns = std::move(edges);
  return g;
}

void Page::add_queries(schema::Store& store) {
  const int n = grid_.bins();
  std::vector<std::int64_t> answered(n), failed(n), lag_count(n), lag_sum_ns(n), lag_max_ns(n);
  std::vector<std::optional<common::LatencyHistogram>> latency(n);
  const auto until_ns =
      report_.run.queries_until_ns.value_or(std::numeric_limits<std::int64_t>::max());
  const bool with_lag = schema::first_query_has_lag(store);
  schema::QueryRows rows(store, until_ns, with_lag);
  schema::QueryErrorKeys errors(store, until_ns);
  schema::QueryKey next_error{};
  bool more_errors = errors.next(next_error);
  std::int64_t total = 0;
  for (schema::QueryTiming q; rows.next(q);) {
    const schema::QueryKey key{q.start_ns, q.client_id, q.seq};
    while (more_errors && next_error < key) more_errors = errors.next(next_error);
    const bool is_error = more_errors && next_error == key;
    const auto b = grid_.bin_of(q.start_ns + q.latency_ns);
    if (!b) continue;
    ++total;
    if (is_error) {
      ++failed[*b];
      continue;
    }
    ++answered[*b];
    if (!latency[*b]) latency[*b].emplace(kBinResolution);
    latency[*b]->record_ns(q.latency_ns);
    if (q.lag_ns) {
      ++lag_count[*b];
      lag_sum_ns[*b] += *q.lag_ns;
      lag_max_ns[*b] = std::max(lag_max_ns[*b], *q.lag_ns);
    }
  }
  if (total == 0) {
    add_aggregate_intervals(store);
    return;
  }
  Chart tput{.id = "throughput", .title = "Throughput", .unit = "queries/s"};
  auto ok = series("answered", n), err = series("failed", n);
  Chart lat{.id = "latency", .title = "Latency", .unit = "ms", .y_log = true};
  auto p50 = series("p50", n), p99 = series("p99", n), max = series("max", n);
  Chart lag{.id = "schedule_lag", .title = "Schedule lag (-R)", .unit = "ms"};
  auto lag_mean = series("mean", n), lag_max = series("max", n);
  bool any_error = false, any_lag = false;
  // Throughput over the part of each bin inside the queries' span (the
  // first and last bins are partly outside it); a bin mostly outside is a
  // gap, one inside with no answer a full stop: 0 queries/s.
  const auto q_from = report_.run.query_start_ns.value_or(grid_.start_ns());
  const auto q_to = report_.run.query_end_ns.value_or(grid_.end_ns());
  for (int i = 0; i < n; ++i) {
    const auto bin_start = grid_.bin_start_ns(i);
    const auto inside_ns = std::min(q_to, grid_.bin_end_ns(i)) - std::max(q_from, bin_start);
    // A sliver of a bin (the span's first or last few ms) gives no rate worth
    // drawing: too few answers over too short a time.
    if (inside_ns * 2 < grid_.width_ns(i)) continue;
    const auto inside_s = seconds(inside_ns);
    ok.values[i] = detail::round_sig(static_cast<double>(answered[i]) / inside_s);
    if (failed[i] > 0) any_error = true;
    err.values[i] = detail::round_sig(static_cast<double>(failed[i]) / inside_s);
    if (const auto& h = latency[i]) {
      p50.values[i] = detail::round_sig(ms(h->percentile_ns(0.5)));
      p99.values[i] = detail::round_sig(ms(h->percentile_ns(0.99)));
      max.values[i] = detail::round_sig(ms(h->percentile_ns(1.0)));
    }
    if (lag_count[i] > 0) {
      any_lag = true;
      lag_mean.values[i] = detail::round_sig(ms(lag_sum_ns[i] / lag_count[i]));
      lag_max.values[i] = detail::round_sig(ms(lag_max_ns[i]));
    }
  }
  tput.series.push_back(std::move(ok));
  if (any_error) tput.series.push_back(std::move(err));
  tput.note = "queries answered per second in each bin";
  keep(charts_, std::move(tput));
  lat.series = {std::move(p50), std::move(p99), std::move(max)};
  lat.note = with_lag ? "scheduled start → answered, as pgbench -R counts it (the schedule lag, "
                        "below, is part of it), of the queries answered in each bin; log scale"
                      : "sent → answered, of the queries answered in each bin; log scale";
  keep(charts_, std::move(lat));
  if (any_lag) {
    lag.series = {std::move(lag_mean), std::move(lag_max)};
    lag.note = "scheduled start → sent: transactions queued in the client behind slow ones";
    keep(charts_, std::move(lag));
  }
}

void Page::add_aggregate_intervals(schema::Store& store) {
  if (!report_.pgbench_aggregate) return;
  const int n = grid_.bins();
  const auto interval_ns = std::max<std::int64_t>(report_.pgbench_aggregate->interval_ns, 1);
  std::vector<double> transactions(n), failures(n), latency_ns(n);
  for (const auto& row : schema::pgbench_aggregate_intervals(store)) {
    const auto end_ns = row.start_ns + interval_ns;
    spread(grid_, end_ns, interval_ns, static_cast<double>(row.transactions), transactions);
    spread(grid_, end_ns, interval_ns, static_cast<double>(row.failures), failures);
    spread(grid_, end_ns, interval_ns, static_cast<double>(row.latency_sum_ns), latency_ns);
  }
  Chart tput{.id = "throughput", .title = "Throughput", .unit = "transactions/s"};
  Chart lat{.id = "latency", .title = "Latency", .unit = "ms", .y_log = true};
  auto ok = series("transactions", n), err = series("failed", n), mean = series("mean", n);
  bool any_failure = false;
  for (int i = 0; i < n; ++i) {
    if (transactions[i] <= 0 && failures[i] <= 0) continue;
    const auto bin_s = seconds(grid_.width_ns(i));
    ok.values[i] = detail::round_sig(transactions[i] / bin_s);
    err.values[i] = detail::round_sig(failures[i] / bin_s);
    any_failure = any_failure || failures[i] > 0;
    if (transactions[i] > 0)
      mean.values[i] = detail::round_sig(latency_ns[i] / transactions[i] / common::kNsPerMsDouble);
  }
  tput.series.push_back(std::move(ok));
  if (any_failure) tput.series.push_back(std::move(err));
  tput.note = fmt::format(
      "pgbench's aggregate log (--aggregate-interval {:.3g} s): transactions per second",
      seconds(interval_ns));
  keep(charts_, std::move(tput));
  lat.series.push_back(std::move(mean));
  lat.note = "mean latency of each aggregate interval (the log holds no percentiles); log scale";
  keep(charts_, std::move(lat));
}

void Page::add_query_path() {
  const int n = grid_.bins();
  std::vector<double> driver(n), backends(n), run_queue(n);
  std::vector<char> covered(n);
  std::map<std::string, std::vector<double>, std::less<>> path;
  bool any = false;
  for (const auto& w : report_.windows) {
    if (!w.accounting || w.end_ns <= w.start_ns) continue;
    const auto& a = *w.accounting;
    if (a.cannot_account) continue;
    any = true;
    const auto span_ns = w.end_ns - w.start_ns;
    spread(grid_, w.end_ns, span_ns, static_cast<double>(a.driver_cpu_ns), driver, &covered);
    spread(grid_, w.end_ns, span_ns, static_cast<double>(a.server_cpu_ns), backends);
    spread(grid_, w.end_ns, span_ns, static_cast<double>(a.run_delay_ns), run_queue);
    for (const auto& [comm, ns] : a.path_cpu_by_comm_ns) {
      auto at = path.find(comm);
      if (at == path.end()) at = path.emplace(comm, std::vector<double>(n)).first;
      spread(grid_, w.end_ns, span_ns, static_cast<double>(ns), at->second);
    }
  }
  if (!any) return;
  const auto bin_ns_d = [&](int i) { return static_cast<double>(grid_.width_ns(i)); };
  Chart c{.id = "query_path_cpu", .title = "Query path CPU", .unit = "cores"};
  const auto add = [&](std::string label, const std::vector<double>& ns) {
    auto s = series(std::move(label), n);
    for (int i = 0; i < n; ++i)
      if (covered[i]) s.values[i] = detail::round_sig(ns[i] / bin_ns_d(i));
    if (std::any_of(ns.begin(), ns.end(), [](double v) { return v > 0; }))
      c.series.push_back(std::move(s));
  };
  add("driver", driver);
  for (const auto& [comm, ns] : path) add(comm + " (path)", ns);
  add("backends", backends);
  add("run-queue delay", run_queue);
  c.note =
      "the run's own processes as the time accounting counts them, constant over each window: "
      "the driver's CPU, poolers' and proxies' CPU, its backends' CPU, and their time runnable "
      "but not running — in cores; several tasks waiting at once put the run-queue delay above "
      "the core count";
  if (report_.run.cores > 0) c.lines.emplace_back("cores", report_.run.cores);
  keep(charts_, std::move(c));
}

namespace {

// One bin's host ticks summed: CPU time by mode, the run queue and D-state
// tasks, the PSI deltas.
struct HostBin {
  std::int64_t user = 0, system = 0, iowait = 0, irq = 0, steal = 0, idle = 0;
  std::int64_t ticks = 0, running_sum = 0, d_sum = 0;
  int running_max = 0, d_max = 0;
  std::int64_t psi_span_ns = 0, cpu_some = 0, io_some = 0, io_full = 0, mem_some = 0, mem_full = 0;
};

// The host's ticks in the grid's span, by bin; `any_psi` whether a tick
// had PSI.
std::vector<HostBin> host_bins(schema::Store& store, const Grid& grid, bool& any_psi) {
  std::vector<HostBin> bins(grid.bins());
  schema::HostStateTicks ticks(store, grid.start_ns(), grid.end_ns());
  for (schema::HostStateTick t; ticks.next(t);) {
    const auto b = grid.bin_of(t.time_ns);
    if (!b || !t.has_host) continue;
    auto& x = bins[*b];
    ++x.ticks;
    x.running_sum += t.procs_running;
    x.d_sum += t.processes_d_state;
    x.running_max = std::max(x.running_max, t.procs_running);
    x.d_max = std::max(x.d_max, t.processes_d_state);
    if (t.has_cpu) {
      x.user += t.user_ns;
      x.system += t.system_ns;
      x.iowait += t.iowait_ns;
      x.irq += t.irq_ns;
      x.steal += t.steal_ns;
      x.idle += t.idle_ns;
    }
    if (t.psi_cpu_some_us && t.interval_ns > 0) {
      any_psi = true;
      x.psi_span_ns += t.interval_ns;
      x.cpu_some += *t.psi_cpu_some_us;
      x.io_some += t.psi_io_some_us.value_or(0);
      x.io_full += t.psi_io_full_us.value_or(0);
      x.mem_some += t.psi_memory_some_us.value_or(0);
      x.mem_full += t.psi_memory_full_us.value_or(0);
    }
  }
  return bins;
}

}  // namespace

void Page::add_host(schema::Store& store, const Host& host) {
  const int cores = host.cores;
  const int n = grid_.bins();
  bool any_psi = false;
  const auto bins = host_bins(store, grid_, any_psi);
  // Chart ids and titles: by role in a pair (client and server may be one
  // machine), else by host name.
  const std::string key = host.role.empty() ? host.name : host.role;
  const std::string on = host.role.empty() ? "" : fmt::format(" — {} ({})", host.role, host.name);
  Chart cpu{
      .id = "host_cpu:" + key, .title = "Host CPU" + on, .unit = "% of all CPUs", .stacked = true};
  const char* modes[] = {"user", "system", "iowait", "irq+softirq", "steal", "idle"};
  for (const char* m : modes) cpu.series.push_back(series(m, n));
  Chart tasks{.id = "tasks:" + key, .title = "Runnable and D-state tasks" + on, .unit = "tasks"};
  auto run_mean = series("runnable", n), run_max = series("runnable (max)", n),
       d_mean = series("D state", n), d_max = series("D state (max)", n);
  Chart psi{
      .id = "psi:" + key, .title = "Pressure stall information" + on, .unit = "% of time stalled"};
  auto cpu_some = series("cpu some", n), io_some = series("io some", n),
       io_full = series("io full", n), mem_some = series("memory some", n),
       mem_full = series("memory full", n);
  for (int i = 0; i < n; ++i) {
    const auto& x = bins[i];
    const auto total = x.user + x.system + x.iowait + x.irq + x.steal + x.idle;
    if (total > 0) {
      const std::int64_t parts[] = {x.user, x.system, x.iowait, x.irq, x.steal, x.idle};
      for (std::size_t k = 0; k < 6; ++k)
        cpu.series[k].values[i] =
            detail::round_sig(100.0 * static_cast<double>(parts[k]) / static_cast<double>(total));
    }
    if (x.ticks > 0) {
      const auto ticks_d = static_cast<double>(x.ticks);
      run_mean.values[i] = detail::round_sig(static_cast<double>(x.running_sum) / ticks_d);
      run_max.values[i] = x.running_max;
      d_mean.values[i] = detail::round_sig(static_cast<double>(x.d_sum) / ticks_d);
      d_max.values[i] = x.d_max;
    }
    if (x.psi_span_ns > 0) {
      const auto pct = [&](std::int64_t us) {
        // ≤ 100 %: a tick's PSI delta and its interval are read at
        // slightly different moments.
        return std::min(100.0,
                        detail::round_sig(100.0 * static_cast<double>(us * common::kNsPerUs) /
                                          static_cast<double>(x.psi_span_ns)));
      };
      cpu_some.values[i] = pct(x.cpu_some);
      io_some.values[i] = pct(x.io_some);
      io_full.values[i] = pct(x.io_full);
      mem_some.values[i] = pct(x.mem_some);
      mem_full.values[i] = pct(x.mem_full);
    }
  }
  cpu.note =
      fmt::format("{} cores; each bin's share of all CPUs' time by mode (/proc/stat)", cores);
  keep(charts_, std::move(cpu));
  tasks.series = {std::move(run_mean), std::move(run_max), std::move(d_mean), std::move(d_max)};
  tasks.lines.emplace_back("cores", cores);
  tasks.note =
      "/proc/stat procs_running (includes the sampler) and sampled tasks in D state: "
      "mean and peak per bin";
  keep(charts_, std::move(tasks));
  if (any_psi) {
    psi.series = {std::move(cpu_some), std::move(io_some), std::move(io_full), std::move(mem_some),
                  std::move(mem_full)};
    psi.note = "/proc/pressure: share of time some (or all) runnable tasks were stalled";
    keep(charts_, std::move(psi));
  }
  add_processes(store, host, key, on);
  hosts_.push_back(host);
}

void Page::add_processes(schema::Store& store, const Host& host, const std::string& key,
                         const std::string& on) {
  const int cores = host.cores;
  const int n = grid_.bins();
  const auto from_ns = grid_.start_ns();
  const auto to_ns = grid_.end_ns();
  const auto ids = schema::sample_ids_in(store, from_ns - 1, to_ns - 1);
  if (!ids) return;
  std::unordered_map<std::int64_t, std::int64_t> sample_time_ns;
  {
    schema::SampleTimeRows times(store);
    for (schema::SampleTime s; times.next(s);)
      if (s.sample_id >= ids->first && s.sample_id <= ids->last)
        sample_time_ns.emplace(s.sample_id, s.time_ns);
  }
  // The bins some tick's deltas cover (from the tick before it): beyond them
  // the process CPU is unmeasured, a gap rather than 0.
  std::vector<char> covered(n);
  {
    std::vector<std::int64_t> times;
    for (const auto& [id, t] : sample_time_ns) times.push_back(t);
    std::sort(times.begin(), times.end());
    std::vector<double> unused(n);
    for (std::size_t k = 1; k < times.size(); ++k)
      spread(grid_, times[k], times[k] - times[k - 1], 0, unused, &covered);
  }
  const auto identities = schema::read_process_identities(store);
  std::unordered_map<std::int64_t, std::size_t> by_id;
  for (std::size_t i = 0; i < identities.size(); ++i) by_id.emplace(identities[i].process_id, i);
  struct Totals {
    std::int64_t cpu_ns = 0, run_delay_ns = 0, d_state_ns = 0;
    std::map<std::string, std::int64_t, std::less<>> wchan_ns;  // off-CPU rows by wchan
  };
  std::unordered_map<std::int64_t, Totals> totals;
  std::map<std::string, std::vector<double>, std::less<>> cpu_by_comm;  // ns per bin
  std::map<std::string, std::int64_t, std::less<>> comm_total_ns;
  schema::ProcessRows rows(store, ids->first);
  for (schema::ProcessTick row; rows.next(row);) {
    if (row.sample_id > ids->last) break;
    const auto it = sample_time_ns.find(row.sample_id);
    if (it == sample_time_ns.end()) continue;
    if (!grid_.bin_of(it->second)) continue;
    auto& t = totals[row.process_id];
    const auto cpu = row.cpu_ns.value_or(0);
    const auto span = row.span_ns.value_or(0);
    t.cpu_ns += cpu;
    t.run_delay_ns += row.run_delay_ns.value_or(0);
    const auto state = row.state;
    if (state == "D") t.d_state_ns += span;
    if (const auto w = row.wchan; w && (state == "D" || (state == "S" && cpu == 0))) {
      auto at = t.wchan_ns.find(*w);
      if (at == t.wchan_ns.end()) at = t.wchan_ns.emplace(std::string(*w), 0).first;
      at->second += std::max<std::int64_t>(span, 1);
    }
    if (cpu > 0) {
      const auto id_at = by_id.find(row.process_id);
      const std::string& comm =
          id_at == by_id.end() ? std::string("?") : identities[id_at->second].comm;
      auto c = cpu_by_comm.find(comm);
      if (c == cpu_by_comm.end()) c = cpu_by_comm.emplace(comm, std::vector<double>(n)).first;
      spread(grid_, it->second, span, static_cast<double>(cpu), c->second);
      comm_total_ns[comm] += cpu;
    }
  }
  // CPU by process name: the busiest kProcessChartNames names, the rest as "other".
  std::vector<std::pair<std::string, std::int64_t>> names(comm_total_ns.begin(),
                                                          comm_total_ns.end());
  std::sort(names.begin(), names.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  const auto bin_ns_d = [&](int i) { return static_cast<double>(grid_.width_ns(i)); };
  Chart proc{.id = "process_cpu:" + key, .title = "CPU by process name" + on, .unit = "cores"};
  std::vector<double> other(n);
  bool any_other = false;
  for (std::size_t k = 0; k < names.size(); ++k) {
    const auto& per_bin = cpu_by_comm[names[k].first];
    if (k >= kProcessChartNames) {
      any_other = true;
      for (int i = 0; i < n; ++i) other[i] += per_bin[i];
      continue;
    }
    auto s = series(names[k].first, n);
    for (int i = 0; i < n; ++i)
      if (covered[i]) s.values[i] = detail::round_sig(per_bin[i] / bin_ns_d(i));
    proc.series.push_back(std::move(s));
  }
  if (any_other) {
    auto s = series("other", n);
    for (int i = 0; i < n; ++i)
      if (covered[i]) s.values[i] = detail::round_sig(other[i] / bin_ns_d(i));
    proc.series.push_back(std::move(s));
  }
  proc.lines.emplace_back("cores", cores);
  proc.note =
      "on-CPU time of all processes of each name (schedstat), in cores; one process at "
      "1.0 is one core saturated";
  keep(charts_, std::move(proc));

  // The processes ranked by CPU and by off-CPU time.
  const auto span_s = seconds(grid_.end_ns() - grid_.start_ns());
  std::vector<std::pair<std::int64_t, const Totals*>> ranked;
  for (const auto& [id, t] : totals) ranked.emplace_back(id, &t);
  auto top = [&](auto key) {
    std::sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
      return key(*a.second) != key(*b.second) ? key(*a.second) > key(*b.second) : a.first < b.first;
    });
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < ranked.size() && i < static_cast<std::size_t>(options_.top_rows);
         ++i)
      if (key(*ranked[i].second) > 0) out.push_back(ranked[i].first);
    return out;
  };
  auto chosen = top([](const Totals& t) { return t.cpu_ns; });
  for (auto id : top([](const Totals& t) { return t.run_delay_ns + t.d_state_ns; }))
    if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
  auto& rows_json = tables_["processes"];
  if (rows_json.is_null()) rows_json = nlohmann::json::array();
  for (auto id : chosen) {
    const auto& t = totals.at(id);
    const auto at = by_id.find(id);
    std::optional<std::string> top_wchan;
    std::int64_t best = 0;
    for (const auto& [w, ns] : t.wchan_ns)
      if (ns > best) best = ns, top_wchan = w;
    rows_json.push_back(
        {{"host", host.role.empty() ? host.name : fmt::format("{} ({})", host.role, host.name)},
         {"pid", at == by_id.end() ? 0 : identities[at->second].pid},
         {"comm", at == by_id.end() ? "" : identities[at->second].comm},
         {"cmdline", at == by_id.end() ? "" : identities[at->second].cmdline},
         {"cpu_s", detail::round_sig(seconds(t.cpu_ns))},
         {"cores", detail::round_sig(seconds(t.cpu_ns) / span_s)},
         {"run_delay_s", detail::round_sig(seconds(t.run_delay_ns))},
         {"d_state_s", detail::round_sig(seconds(t.d_state_ns))},
         {"off_cpu_s", detail::round_sig(seconds(t.run_delay_ns + t.d_state_ns))},
         {"top_wchan", top_wchan ? nlohmann::json(*top_wchan) : nlohmann::json(nullptr)}});
  }
}

}  // namespace stallscope::report
