// explain: reads a run file in a few streaming passes (queries by start time,
// host samples, ASH rows, process rows), each attributed to windows, then
// sums the windows into the whole-run accounting and hands the facts to the
// finding rules.
#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>

#include "common/error.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"

namespace stallscope::correlate {
namespace detail {
namespace {

std::optional<std::int64_t> opt_int64(const SQLite::Column& c) {
  if (c.isNull()) return std::nullopt;
  return c.getInt64();
}
std::optional<int> opt_int(const SQLite::Column& c) {
  if (c.isNull()) return std::nullopt;
  return c.getInt();
}
std::optional<std::string> opt_string(const SQLite::Column& c) {
  if (c.isNull()) return std::nullopt;
  return c.getString();
}

double ms(std::int64_t ns) {
  return double(ns) / kNsPerMs;
}

// The run row and what identifies the driver.
struct RunRow {
  RunSummary summary;
  int stallscope_pid = 0;
  std::optional<std::int64_t> stallscope_start_ticks;
};

RunRow read_run(SQLite::Database& db) {
  SQLite::Statement st(db,
                       "SELECT host, kernel, cores, mode, status, start_ns, end_ns, clients, "
                       "threads, protocol, sql, server_version, end_reason, hz, stallscope_pid, "
                       "stallscope_start_ticks FROM run WHERE run_id = 1");
  if (!st.executeStep())
    throw_usage(fmt::format("cannot explain {}: it holds no run", db.getFilename()));
  RunRow r;
  auto& s = r.summary;
  s.host = st.getColumn(0).getString();
  s.kernel = st.getColumn(1).getString();
  s.cores = st.getColumn(2).getInt();
  s.mode = st.getColumn(3).getString();
  s.status = st.getColumn(4).getString();
  s.start_ns = st.getColumn(5).getInt64();
  s.end_ns = opt_int64(st.getColumn(6));
  if (s.end_ns) s.duration_ns = *s.end_ns - s.start_ns;
  s.clients = opt_int(st.getColumn(7));
  s.threads = opt_int(st.getColumn(8));
  s.protocol = opt_string(st.getColumn(9));
  s.sql = opt_string(st.getColumn(10));
  s.server_version = opt_string(st.getColumn(11));
  s.end_reason = opt_string(st.getColumn(12));
  s.hz = st.getColumn(13).getDouble();
  r.stallscope_pid = st.getColumn(14).getInt();
  r.stallscope_start_ticks = opt_int64(st.getColumn(15));
  return r;
}

// Nearest-rank percentile of the latencies, via SQLite's sorter (which
// spills to temporary storage) so memory stays flat.
std::int64_t latency_rank(SQLite::Database& db, std::int64_t n, double p) {
  auto rank = static_cast<std::int64_t>(std::ceil(p * double(n)));
  rank = std::clamp<std::int64_t>(rank, 1, n);
  SQLite::Statement st(db, "SELECT latency_ns FROM query ORDER BY latency_ns LIMIT 1 OFFSET ?");
  st.bind(1, static_cast<std::int64_t>(rank - 1));
  st.executeStep();
  return st.getColumn(0).getInt64();
}

void read_query_totals(SQLite::Database& db, RunSummary& s) {
  SQLite::Statement st(db,
                       "SELECT count(*), count(sqlstate), avg(latency_ns), max(latency_ns), "
                       "min(start_ns), max(start_ns + latency_ns) FROM query");
  st.executeStep();
  s.queries = st.getColumn(0).getInt64();
  s.errors = st.getColumn(1).getInt64();
  if (s.queries == 0) return;
  s.latency_mean_ms = st.getColumn(2).getDouble() / kNsPerMs;
  s.latency_max_ms = ms(st.getColumn(3).getInt64());
  s.query_start_ns = st.getColumn(4).getInt64();
  s.query_end_ns = st.getColumn(5).getInt64();
  auto span_ns = *s.query_end_ns - *s.query_start_ns;
  if (span_ns > 0) s.tps = double(s.queries) / (double(span_ns) / kNsPerS);
  s.latency_p50_ms = ms(latency_rank(db, s.queries, 0.50));
  s.latency_p99_ms = ms(latency_rank(db, s.queries, 0.99));
}

// Mean spacing of rows in a tick table, or 1/hz when there are fewer than 2.
std::int64_t tick_period_ns(SQLite::Database& db, const char* table, double hz) {
  SQLite::Statement st(db,
                       fmt::format("SELECT count(*), min(time_ns), max(time_ns) FROM {}", table));
  st.executeStep();
  auto n = st.getColumn(0).getInt64();
  if (n >= 2) {
    auto period = (st.getColumn(2).getInt64() - st.getColumn(1).getInt64()) / (n - 1);
    if (period > 0) return period;
  }
  return hz > 0 ? static_cast<std::int64_t>(double(kNsPerS) / hz) : kNsPerS;
}

// The processes whose time is client time: the driver and this run's backends.
struct QueryPath {
  std::optional<std::int64_t> driver_process_id;
  std::unordered_set<std::int64_t> backend_process_ids;
  std::unordered_set<int> backend_pids;  // for ASH
  bool is_path(std::int64_t id) const {
    return id == driver_process_id || backend_process_ids.contains(id);
  }
};

QueryPath find_query_path(SQLite::Database& db, const RunRow& run) {
  QueryPath qp;
  {
    SQLite::Statement st(db,
                         "SELECT process_id FROM process WHERE pid = ?1 AND "
                         "(?2 IS NULL OR start_ticks = ?2) AND "
                         "(start_ns IS NULL OR start_ns <= ?3) "
                         "ORDER BY start_ticks DESC LIMIT 1");
    st.bind(1, run.stallscope_pid);
    if (run.stallscope_start_ticks) {
      st.bind(2, *run.stallscope_start_ticks);
    } else {
      st.bind(2);
    }
    st.bind(3, run.summary.start_ns + kBackendStartSlackNs);
    if (st.executeStep()) qp.driver_process_id = st.getColumn(0).getInt64();
  }
  SQLite::Statement clients(
      db, "SELECT backend_pid, connect_ns FROM client WHERE backend_pid IS NOT NULL");
  SQLite::Statement proc(db,
                         "SELECT process_id FROM process WHERE pid = ?1 AND "
                         "(start_ns IS NULL OR ?2 IS NULL OR start_ns <= ?2) "
                         "ORDER BY start_ticks DESC LIMIT 1");
  while (clients.executeStep()) {
    int pid = clients.getColumn(0).getInt();
    qp.backend_pids.insert(pid);
    proc.bind(1, pid);
    if (auto c = opt_int64(clients.getColumn(1))) {
      proc.bind(2, *c + kBackendStartSlackNs);
    } else {
      proc.bind(2);
    }
    if (proc.executeStep()) qp.backend_process_ids.insert(proc.getColumn(0).getInt64());
    proc.reset();
  }
  return qp;
}

// What each window accumulates while the streams pass.
struct WindowAcc {
  HostTotals host;
  std::int64_t sampler_cpu_ns = 0;
  std::int64_t driver_cpu_ns = 0;
  std::int64_t server_cpu_ns = 0;
  std::int64_t run_delay_ns = 0;
  std::int64_t ash_cpu_rows = 0;  // backends active with no wait event
  std::map<std::string, std::int64_t> ash_event_rows;
  std::map<std::string, std::int64_t> ash_class_rows;
};

// Window boundaries: window i covers [starts[i], ends[i]); the windows
// partition [A, B).
struct WindowIndex {
  std::vector<std::int64_t> starts;
  std::vector<std::int64_t> ends;
  // Index of the window holding t, or -1 outside [A, B).
  std::ptrdiff_t find(std::int64_t t) const {
    if (starts.empty() || t < starts.front() || t >= ends.back()) return -1;
    auto it = std::upper_bound(starts.begin(), starts.end(), t);
    return (it - starts.begin()) - 1;
  }
};

// Adds `value`, spread evenly over [t − span, t), to the windows it overlaps.
// Without a span the value goes to the window holding t.
template <typename Add>
void spread(const WindowIndex& wi, std::int64_t t, std::optional<std::int64_t> span_ns,
            std::int64_t value, Add&& add) {
  if (!span_ns || *span_ns <= 0) {
    if (auto i = wi.find(t); i >= 0) add(static_cast<std::size_t>(i), value);
    return;
  }
  const std::int64_t from = t - *span_ns;
  auto i = wi.find(std::max(from, wi.starts.front()));
  if (i < 0) return;
  for (auto k = static_cast<std::size_t>(i); k < wi.starts.size() && wi.starts[k] < t; ++k) {
    auto overlap = std::min(t, wi.ends[k]) - std::max(from, wi.starts[k]);
    if (overlap <= 0) continue;
    add(k, static_cast<std::int64_t>(static_cast<__int128>(value) * overlap / *span_ns));
  }
}

// Latency statistics of one window's queries (the vector is reordered).
void fill_latency_stats(std::vector<std::int64_t>& lat, Window& w) {
  w.queries = static_cast<std::int64_t>(lat.size());
  if (lat.empty()) return;
  const auto [mn, mx] = std::minmax_element(lat.begin(), lat.end());
  w.latency_min_ms = ms(*mn);
  w.latency_max_ms = ms(*mx);
  long double sum = 0;
  for (auto v : lat) sum += v;
  const long double mean = sum / lat.size();
  long double sq = 0;
  for (auto v : lat) sq += (v - mean) * (v - mean);
  w.latency_mean_ms = double(mean / kNsPerMs);
  w.latency_stddev_ms = double(std::sqrt(sq / lat.size()) / kNsPerMs);
  auto rank = static_cast<std::size_t>(std::ceil(0.99 * double(lat.size())));
  rank = std::clamp<std::size_t>(rank, 1, lat.size());
  std::nth_element(lat.begin(), lat.begin() + (rank - 1), lat.end());
  w.latency_p99_ms = ms(lat[rank - 1]);
}

// Pass 1: queries in start order into windows. Holds one window's latencies.
void build_windows(SQLite::Database& db, const ExplainOptions& opt, Report& report, WindowIndex& wi,
                   std::int64_t A, std::int64_t B) {
  auto& windows = report.windows;
  SQLite::Statement q(db,
                      "SELECT start_ns, latency_ns, sqlstate IS NOT NULL FROM query "
                      "ORDER BY start_ns");
  std::vector<std::int64_t> lat;
  if (report.query_windows) {
    const auto n = *opt.every_queries;
    Window cur;
    std::int64_t cur_end = 0;
    auto close = [&] {
      fill_latency_stats(lat, cur);
      cur.duration_s = double(cur_end - cur.start_ns) / kNsPerS;
      if (cur_end > cur.start_ns) cur.tps = double(cur.queries) / cur.duration_s;
      windows.push_back(cur);
      lat.clear();
      cur = Window{};
    };
    while (q.executeStep()) {
      auto start = q.getColumn(0).getInt64();
      auto latency = q.getColumn(1).getInt64();
      if (lat.empty()) {
        cur.start_ns = start;
        cur_end = start;
      }
      lat.push_back(latency);
      cur_end = std::max(cur_end, start + latency);
      if (q.getColumn(2).getInt()) ++cur.errors;
      if (static_cast<std::int64_t>(lat.size()) == n) close();
    }
    if (!lat.empty()) close();
    for (std::size_t i = 0; i < windows.size(); ++i) {
      windows[i].end_ns = i + 1 < windows.size() ? windows[i + 1].start_ns : B;
    }
  } else {
    const auto w = opt.window_ns;
    const auto count = std::max<std::int64_t>(1, (B - A + w - 1) / w);
    if (count > kMaxWindows) {
      throw_usage(
          fmt::format("cannot explain with --window {} ns: {} windows is too many (at most {})", w,
                      count, kMaxWindows));
    }
    windows.resize(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      auto& win = windows[static_cast<std::size_t>(i)];
      win.start_ns = A + i * w;
      win.end_ns = std::min(A + (i + 1) * w, B);
      win.duration_s = double(win.end_ns - win.start_ns) / kNsPerS;
    }
    std::ptrdiff_t cur = -1;
    auto close = [&] {
      if (cur < 0) return;
      auto& win = windows[static_cast<std::size_t>(cur)];
      fill_latency_stats(lat, win);
      lat.clear();
    };
    while (q.executeStep()) {
      auto start = q.getColumn(0).getInt64();
      auto i = std::clamp<std::ptrdiff_t>((start - A) / w, 0, count - 1);
      if (i != cur) {
        close();
        cur = i;
      }
      lat.push_back(q.getColumn(1).getInt64());
      if (q.getColumn(2).getInt()) ++windows[static_cast<std::size_t>(i)].errors;
    }
    close();
    for (auto& win : windows) {
      if (win.duration_s > 0) win.tps = double(win.queries) / win.duration_s;
    }
  }
  for (auto& win : windows) {
    win.start_offset_s =
        double(win.start_ns - (windows.empty() ? A : windows.front().start_ns)) / kNsPerS;
    wi.starts.push_back(win.start_ns);
    wi.ends.push_back(win.end_ns);
  }
}

// Pass 2: samples and host samples. A tick's CPU deltas cover the interval
// before it, so a tick at time t counts in the window holding t − 1 ns.
void read_host(SQLite::Database& db, const WindowIndex& wi, std::vector<WindowAcc>& acc,
               std::int64_t A, std::int64_t B) {
  SQLite::Statement st(db,
                       "SELECT s.time_ns, s.sampler_cpu_ns, h.sample_id, h.cpu_user_ns, "
                       "h.cpu_nice_ns, h.cpu_system_ns, h.cpu_irq_ns, h.cpu_softirq_ns, "
                       "h.cpu_idle_ns, h.cpu_iowait_ns, h.cpu_steal_ns, h.procs_running, "
                       "h.processes_d_state FROM sample s LEFT JOIN host_sample h "
                       "ON h.sample_id = s.sample_id WHERE s.time_ns > ?1 AND s.time_ns <= ?2 "
                       "ORDER BY s.sample_id");
  st.bind(1, A);
  st.bind(2, B);
  while (st.executeStep()) {
    auto i = wi.find(st.getColumn(0).getInt64() - 1);
    if (i < 0) continue;
    auto& a = acc[static_cast<std::size_t>(i)];
    a.sampler_cpu_ns += st.getColumn(1).getInt64();
    if (st.getColumn(2).isNull()) continue;
    a.host.procs_running_max = std::max(a.host.procs_running_max, st.getColumn(11).getInt());
    a.host.processes_d_state_max =
        std::max(a.host.processes_d_state_max, st.getColumn(12).getInt());
    if (st.getColumn(3).isNull()) continue;  // first tick: no deltas
    std::int64_t busy = 0;
    for (int c = 3; c <= 7; ++c) busy += st.getColumn(c).getInt64();
    auto idle = st.getColumn(8).getInt64();
    auto iowait = st.getColumn(9).getInt64();
    auto steal = st.getColumn(10).getInt64();
    a.host.busy_ns += busy;
    a.host.idle_ns += idle;
    a.host.iowait_ns += iowait;
    a.host.steal_ns += steal;
    a.host.total_ns += busy + idle + iowait + steal;
    ++a.host.cpu_rows;
  }
}

std::string event_label(const SQLite::Column& type, const SQLite::Column& event) {
  if (type.isNull()) return "CPU";
  return type.getString() + ":" + (event.isNull() ? std::string("?") : event.getString());
}

// Pass 3: ASH rows of this run's backends (or, without clients, of every
// client backend), by poll time.
void read_ash(SQLite::Database& db, const QueryPath& qp, bool use_pids, const WindowIndex& wi,
              std::vector<WindowAcc>& acc, Facts& f, std::int64_t A, std::int64_t B) {
  SQLite::Statement st(db,
                       "SELECT time_ns, pid, backend_type, state, wait_event_type, wait_event "
                       "FROM pg_activity_sample WHERE time_ns >= ?1 AND time_ns < ?2 "
                       "ORDER BY time_ns");
  st.bind(1, A);
  st.bind(2, B);
  while (st.executeStep()) {
    if (use_pids) {
      if (!qp.backend_pids.contains(st.getColumn(1).getInt())) continue;
    } else {
      auto bt = st.getColumn(2);
      if (!bt.isNull() && bt.getString() != "client backend") continue;
    }
    auto state = opt_string(st.getColumn(3));
    if (state && *state == "idle") continue;
    auto i = wi.find(st.getColumn(0).getInt64());
    if (i < 0) continue;
    auto& a = acc[static_cast<std::size_t>(i)];
    auto label = event_label(st.getColumn(4), st.getColumn(5));
    ++f.ash_rows;
    ++a.ash_event_rows[label];
    ++f.ash_event_rows[label];
    if (st.getColumn(4).isNull()) {
      if (state && *state == "active") ++a.ash_cpu_rows;
      continue;
    }
    auto cls = st.getColumn(4).getString();
    if (!is_server_wait_class(cls)) continue;
    ++a.ash_class_rows[cls];
    ++f.ash_class_rows[cls];
  }
}

// Pass 4: process rows, spread over the span each delta covers.
void read_processes(SQLite::Database& db, const QueryPath& qp, const WindowIndex& wi,
                    std::vector<WindowAcc>& acc, Facts& f, std::int64_t A, std::int64_t B,
                    std::int64_t clock_ticks_per_s) {
  SQLite::Statement st(
      db,
      "SELECT s.time_ns, ps.process_id, ps.state, ps.cpu_ns, ps.run_delay_ns, "
      "ps.span_ns, ps.wchan, ps.utime_ticks, ps.stime_ticks FROM process_sample ps JOIN sample s "
      "ON s.sample_id = ps.sample_id WHERE s.time_ns > ?1 "
      "ORDER BY ps.sample_id");
  st.bind(1, A);
  std::unordered_map<std::int64_t, std::int64_t> cpu_by_process;
  while (st.executeStep()) {
    const auto t = st.getColumn(0).getInt64();
    const auto id = st.getColumn(1).getInt64();
    const auto span = opt_int64(st.getColumn(5));
    const bool driver = qp.driver_process_id && id == *qp.driver_process_id;
    const bool backend = qp.backend_process_ids.contains(id);
    if (span && t - *span >= B) continue;
    if (!span && t >= B) continue;
    std::int64_t cpu_in_span = 0;
    // schedstat covers the thread-group leader only; /proc/PID/stat ticks
    // cover every thread. Take the larger, so a multi-threaded driver's
    // worker threads count.
    auto cpu = opt_int64(st.getColumn(3));
    if (!st.getColumn(7).isNull() && !st.getColumn(8).isNull() && clock_ticks_per_s > 0) {
      const auto ticks_ns =
          (st.getColumn(7).getInt64() + st.getColumn(8).getInt64()) * kNsPerS / clock_ticks_per_s;
      cpu = std::max(cpu.value_or(0), ticks_ns);
    }
    if (cpu) {
      spread(wi, t, span, *cpu, [&](std::size_t k, std::int64_t v) {
        cpu_in_span += v;
        if (driver) acc[k].driver_cpu_ns += v;
        if (backend) acc[k].server_cpu_ns += v;
      });
    }
    cpu_by_process[id] += cpu_in_span;
    f.all_cpu_ns += cpu_in_span;
    if (!driver && !backend) f.other_cpu_ns += cpu_in_span;
    if (auto delay = opt_int64(st.getColumn(4))) {
      spread(wi, t, span, *delay, [&](std::size_t k, std::int64_t v) {
        f.all_run_delay_ns += v;
        if (driver || backend) acc[k].run_delay_ns += v;
      });
    }
    if (backend && wi.find(t) >= 0 && st.getColumn(2).getString() == "D") {
      ++f.backend_d_rows;
      auto wchan = st.getColumn(6);
      ++f.backend_d_wchan_rows[wchan.isNull() ? std::string("-") : wchan.getString()];
    }
  }
  // The processes off the query path that used the most CPU.
  std::vector<std::pair<std::int64_t, std::int64_t>> others;
  for (auto [id, cpu] : cpu_by_process) {
    if (!qp.is_path(id) && cpu > 0) others.emplace_back(id, cpu);
  }
  std::sort(others.begin(), others.end(), [](auto& x, auto& y) {
    return x.second != y.second ? x.second > y.second : x.first < y.first;
  });
  SQLite::Statement name(db, "SELECT pid, comm FROM process WHERE process_id = ?");
  for (std::size_t i = 0; i < others.size() && i < 3; ++i) {
    name.bind(1, others[i].first);
    if (name.executeStep()) {
      f.top_other.push_back({others[i].first, name.getColumn(0).getInt(),
                             name.getColumn(1).getString(), others[i].second});
    }
    name.reset();
  }
}

// Processes off the query path at kSingleThreadMinCores..kSingleThreadMaxCores
// in some bucket. A row's delta covers the span before its tick, so a row at
// time t belongs to the bucket holding t − 1 ns.
// SQL groups per (process, bucket) so memory holds only the hot buckets of
// one process at a time.
void find_single_threads(SQLite::Database& db, const QueryPath& qp, Facts& f,
                         std::int64_t bucket_ns, int stallscope_pid) {
  const auto A = f.span_start_ns, B = f.span_end_ns;
  SQLite::Statement st(
      db,
      "SELECT ps.process_id, (s.time_ns - 1 - ?1) / ?3 AS bucket, sum(ps.cpu_ns) AS cpu "
      "FROM process_sample ps JOIN sample s ON s.sample_id = ps.sample_id "
      "WHERE s.time_ns > ?1 AND s.time_ns <= ?2 AND ps.cpu_ns IS NOT NULL "
      "GROUP BY ps.process_id, bucket HAVING cpu >= ?4 AND cpu <= ?5 "
      "ORDER BY ps.process_id, bucket");
  st.bind(1, A);
  st.bind(2, B);
  st.bind(3, bucket_ns);
  st.bind(4, static_cast<std::int64_t>(kSingleThreadMinCores * double(bucket_ns)));
  st.bind(5, static_cast<std::int64_t>(kSingleThreadMaxCores * double(bucket_ns)));
  SQLite::Statement proc(db, "SELECT pid, comm FROM process WHERE process_id = ?");
  SQLite::Statement total(db,
                          "SELECT sum(ps.cpu_ns) FROM process_sample ps JOIN sample s "
                          "ON s.sample_id = ps.sample_id WHERE ps.process_id = ?1 "
                          "AND s.time_ns > ?2 AND s.time_ns <= ?3");
  std::optional<SingleThreadCandidate> cur;
  auto close = [&] {
    if (!cur) return;
    proc.bind(1, cur->process.process_id);
    if (proc.executeStep()) {
      cur->process.pid = proc.getColumn(0).getInt();
      cur->process.comm = proc.getColumn(1).getString();
    }
    proc.reset();
    total.bind(1, cur->process.process_id);
    total.bind(2, A);
    total.bind(3, B);
    if (total.executeStep()) cur->process.cpu_ns = total.getColumn(0).getInt64();
    total.reset();
    if (cur->process.pid != stallscope_pid) f.single_thread.push_back(std::move(*cur));
    cur.reset();
  };
  while (st.executeStep()) {
    auto id = st.getColumn(0).getInt64();
    if (qp.is_path(id)) continue;
    if (cur && cur->process.process_id != id) close();
    auto bucket = st.getColumn(1).getInt64();
    if (!cur) {
      cur = SingleThreadCandidate{};
      cur->process.process_id = id;
      cur->bucket_ns = bucket_ns;
      cur->first_hot_ns = A + bucket * bucket_ns;
    }
    ++cur->hot_buckets;
    cur->hot_cpu_ns += st.getColumn(2).getInt64();
    cur->last_hot_end_ns = std::min(B, A + (bucket + 1) * bucket_ns);
  }
  close();
}

Accounting make_accounting(int clients, std::int64_t wall_ns, const WindowAcc& a, const Facts& f) {
  Accounting acc;
  acc.clients = clients;
  acc.wall_ns = wall_ns;
  acc.client_ns = static_cast<std::int64_t>(clients) * wall_ns;
  acc.sampler_cpu_ns = a.sampler_cpu_ns;
  acc.driver_cpu_ns = std::max<std::int64_t>(0, a.driver_cpu_ns - a.sampler_cpu_ns);
  acc.server_cpu_ns = f.backends_on_host ? a.server_cpu_ns : a.ash_cpu_rows * f.ash_period_ns;
  for (const auto& [cls, rows] : a.ash_class_rows) {
    acc.server_wait_by_class_ns.emplace_back(cls, rows * f.ash_period_ns);
    acc.server_wait_ns += rows * f.ash_period_ns;
  }
  std::stable_sort(acc.server_wait_by_class_ns.begin(), acc.server_wait_by_class_ns.end(),
                   [](auto& x, auto& y) { return x.second > y.second; });
  acc.run_delay_ns = a.run_delay_ns;
  const auto parts_ns =
      acc.driver_cpu_ns + acc.server_cpu_ns + acc.server_wait_ns + acc.run_delay_ns;
  acc.remainder_ns = std::max<std::int64_t>(0, acc.client_ns - parts_ns);
  acc.excess_ns = std::max<std::int64_t>(0, parts_ns - acc.client_ns);
  auto part = [&](std::string name, std::int64_t ns) {
    acc.parts.push_back(
        {std::move(name), ns, acc.client_ns > 0 ? double(ns) / double(acc.client_ns) : 0.0});
  };
  part("driver_cpu", acc.driver_cpu_ns);
  part("server_cpu", acc.server_cpu_ns);
  for (const auto& [cls, ns] : acc.server_wait_by_class_ns) part("server_wait:" + cls, ns);
  part("run_queue", acc.run_delay_ns);
  part("remainder", acc.remainder_ns);
  return acc;
}

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
  total.run_delay_ns += a.run_delay_ns;
  total.ash_cpu_rows += a.ash_cpu_rows;
  for (const auto& [k, v] : a.ash_class_rows) total.ash_class_rows[k] += v;
}

double pct(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? 100.0 * double(part) / double(whole) : 0;
}

}  // namespace

bool is_server_wait_class(std::string_view type) {
  return type != "Client" && type != "Activity";
}

}  // namespace detail

Report explain(schema::Store& store, const ExplainOptions& options) {
  using namespace detail;
  auto& db = store.db();
  if (options.window_ns <= 0) throw_usage("cannot explain: --window must be positive");
  if (options.every_queries && *options.every_queries <= 0) {
    throw_usage("cannot explain: --every must be a positive number of queries");
  }
  try {
    Report report;
    auto run = read_run(db);
    report.run = run.summary;
    read_query_totals(db, report.run);

    Facts f;
    f.has_queries = report.run.queries > 0;
    f.cores = report.run.cores;
    f.threads = report.run.threads.value_or(1);
    f.ash_period_ns = tick_period_ns(db, "ash_tick", report.run.hz);
    f.sample_period_ns = tick_period_ns(db, "sample", report.run.hz);
    f.ash_available = db.execAndGet("SELECT count(*) FROM ash_tick").getInt64() > 0 ||
                      db.execAndGet("SELECT count(*) FROM pg_activity_sample").getInt64() > 0;
    if (f.ash_available) report.ash_period_ns = f.ash_period_ns;

    // The analysed span [A, B).
    if (f.has_queries) {
      f.span_start_ns = *report.run.query_start_ns;
      f.span_end_ns = *report.run.query_end_ns;
    } else {
      SQLite::Statement st(db, "SELECT min(time_ns), max(time_ns) FROM sample");
      st.executeStep();
      if (!st.getColumn(0).isNull()) {
        f.span_start_ns = st.getColumn(0).getInt64();
        f.span_end_ns = st.getColumn(1).getInt64() + 1;  // include the last tick
      } else {
        f.span_start_ns = report.run.start_ns;
        f.span_end_ns = report.run.end_ns.value_or(report.run.start_ns);
      }
    }
    f.span_end_ns = std::max(f.span_end_ns, f.span_start_ns + 1);
    const auto A = f.span_start_ns, B = f.span_end_ns;

    report.query_windows = options.every_queries.has_value() && f.has_queries;
    if (report.query_windows) {
      report.every_queries = options.every_queries;
    } else {
      report.window_ns = options.window_ns;
    }
    if (options.every_queries && !f.has_queries) {
      report.notes.push_back(
          "--every needs queries and this file has none: windows are by time instead.");
    }

    auto qp = find_query_path(db, run);
    f.backends_on_host = !qp.backend_process_ids.empty();
    const bool use_pids = !qp.backend_pids.empty();

    WindowIndex wi;
    build_windows(db, options, report, wi, A, B);
    std::vector<WindowAcc> acc(report.windows.size());
    read_host(db, wi, acc, A, B);
    read_ash(db, qp, use_pids, wi, acc, f, A, B);
    read_processes(db, qp, wi, acc, f, A, B,
                   db.execAndGet("SELECT clock_ticks_per_s FROM run").getInt64());
    find_single_threads(db, qp, f, report.query_windows ? kNsPerS : options.window_ns,
                        run.stallscope_pid);

    const int clients = report.run.clients.value_or(
        static_cast<int>(db.execAndGet("SELECT count(DISTINCT client_id) FROM query").getInt64()));
    WindowAcc total;
    f.window_wait_share.resize(report.windows.size());
    f.window_steal_share.resize(report.windows.size());
    for (std::size_t i = 0; i < report.windows.size(); ++i) {
      auto& w = report.windows[i];
      const auto& a = acc[i];
      add_into(total, a);
      if (a.host.cpu_rows > 0) {
        w.cpu_busy_pct = pct(a.host.busy_ns, a.host.total_ns);
        w.cpu_idle_pct = pct(a.host.idle_ns, a.host.total_ns);
        w.cpu_iowait_pct = pct(a.host.iowait_ns, a.host.total_ns);
        w.cpu_steal_pct = pct(a.host.steal_ns, a.host.total_ns);
        auto demand = a.host.busy_ns + a.host.steal_ns;
        f.window_steal_share[i] = demand > 0 ? double(a.host.steal_ns) / double(demand) : 0;
      }
      if (a.host.procs_running_max > 0 || a.host.cpu_rows > 0) {
        w.procs_running_max = a.host.procs_running_max;
        w.processes_d_state_max = a.host.processes_d_state_max;
      }
      std::int64_t best = 0;
      for (const auto& [label, rows] : a.ash_event_rows) {
        if (rows > best) {
          best = rows;
          w.top_wait_event = label;
        }
      }
      w.top_wait_event_samples = best;
      const auto wall = w.end_ns - w.start_ns;
      if (f.has_queries) {
        w.accounting = make_accounting(clients, wall, a, f);
        for (const auto& [cls, ns] : w.accounting->server_wait_by_class_ns) {
          f.window_wait_share[i][cls] =
              w.accounting->client_ns > 0 ? double(ns) / double(w.accounting->client_ns) : 0;
        }
      } else {
        for (const auto& [cls, rows] : a.ash_class_rows) f.window_wait_share[i][cls] = double(rows);
      }
    }
    f.host = total.host;
    if (f.has_queries) report.accounting = make_accounting(clients, B - A, total, f);

    // Notes: sampling limits and caveats.
    if (f.ash_available) {
      report.notes.push_back(fmt::format(
          "ASH polls pg_stat_activity every {:.1f} ms: a wait shorter than that is seen with "
          "probability about its length / {:.1f} ms; wait times are estimated as samples x period.",
          ms(f.ash_period_ns), ms(f.ash_period_ns)));
    } else {
      report.notes.push_back(
          "No ASH samples in this file: server waits are unknown and stay in the remainder.");
    }
    report.notes.push_back(fmt::format(
        "Host state is sampled every {:.1f} ms; process CPU and run delay are exact schedstat "
        "deltas, spread over the span each covers; D-state time is rows x period.",
        ms(f.sample_period_ns)));
    if (!f.has_queries) {
      report.notes.push_back(
          "This file holds no queries (a record file): no time accounting; findings come from host "
          "state and ASH only, scored as shares of host CPU time or of sampled session time.");
    } else {
      if (!f.backends_on_host) {
        report.notes.push_back(
            "This run's backends were not found among the sampled processes (server on another "
            "host?): "
            "server CPU is estimated from ASH samples of active backends with no wait event.");
      }
      if (!qp.driver_process_id) {
        report.notes.push_back(
            "The stallscope process was not found among the sampled processes: driver CPU is 0.");
      }
      if (report.accounting && report.accounting->excess_ns > 0) {
        report.notes.push_back(fmt::format(
            "The measured parts exceed client time by {:.1f}%: they overlap (one driver thread "
            "serves "
            "several clients; a backend on CPU may be waiting in the run queue in between).",
            pct(report.accounting->excess_ns, report.accounting->client_ns)));
      }
      report.notes.push_back(
          "Run-queue delay of the query path is charged to server_cpu, client_cpu and runqueue in "
          "proportion to the CPU each of backends, driver and other processes used.");
    }
    report.findings = find(report, f);
    return report;
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite, fmt::format("cannot read {}: {}", store.path(), e.what()),
                e.getExtendedErrorCode());
  }
}

}  // namespace stallscope::correlate
