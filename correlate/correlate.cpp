// explain: reads a run file in a few streaming passes (queries by start time,
// host samples, ASH rows, process rows), each attributed to windows, then
// sums the windows into the whole-run accounting and hands the facts to the
// finding rules.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "correlate/attribution.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"
#include "schema/process_scan.h"
#include "schema/row.h"

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

bool has_column(SQLite::Database& db, const char* table, const char* column) {
  SQLite::Statement st(db, "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2");
  st.bind(1, table);
  st.bind(2, column);
  st.executeStep();
  return st.getColumn(0).getInt64() > 0;
}

double ms(std::int64_t ns) {
  return double(ns) / kNsPerMs;
}

// STALLSCOPE_EXPLAIN_TIMING=1: each pass's wall time on stderr (for
// tools/bench correlate; never part of the report).
class PassClock {
 public:
  PassClock() : on_(std::getenv("STALLSCOPE_EXPLAIN_TIMING") != nullptr) {}
  void lap(const char* pass) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    const auto cpu = std::clock();
    fmt::print(stderr, "explain pass {:<22} wall {:7.3f} s  cpu {:7.3f} s\n", pass,
               std::chrono::duration<double>(now - last_).count(),
               double(cpu - last_cpu_) / CLOCKS_PER_SEC);
    last_ = now;
    last_cpu_ = cpu;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::clock_t last_cpu_ = std::clock();
};

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

// Latency histogram for the whole-run percentiles in one pass and bounded
// memory: values below 1024 ns exact, above in buckets 1/512 of a power of two
// wide (relative width < 0.2 %). A percentile is the largest value seen in the
// bucket holding the nearest rank, so it is exact when that bucket holds one
// distinct value and never more than 0.2 % above the exact one.
class LatencyHistogram {
 public:
  LatencyHistogram() : counts_(kBuckets, 0), max_(kBuckets, 0) {}
  void add(std::int64_t v) {
    v = std::max<std::int64_t>(0, v);
    const auto i = index(static_cast<std::uint64_t>(v));
    ++counts_[i];
    max_[i] = std::max(max_[i], v);
    ++n_;
  }
  // Nearest-rank percentile p in (0, 1]; absent without values.
  std::optional<std::int64_t> percentile(double p) const {
    if (n_ == 0) return std::nullopt;
    auto rank = static_cast<std::int64_t>(std::ceil(p * double(n_)));
    rank = std::clamp<std::int64_t>(rank, 1, n_);
    std::int64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return max_[i];
    }
    return std::nullopt;
  }

 private:
  static constexpr std::size_t kBuckets = 55 * 512 + 512;
  static std::size_t index(std::uint64_t v) {
    if (v < 1024) return static_cast<std::size_t>(v);
    const int msb = 63 - __builtin_clzll(v);
    const int shift = msb - 9;
    return static_cast<std::size_t>(shift) * 512 + static_cast<std::size_t>(v >> shift);
  }
  std::vector<std::int64_t> counts_;
  std::vector<std::int64_t> max_;
  std::int64_t n_ = 0;
};

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
  // Path processes whose cgroup's cpu.stat showed throttling in the span.
  std::unordered_set<std::int64_t> throttled_process_ids;
  // Checkpointer processes (cmdline "postgres: checkpointer"), for stalls.
  std::unordered_set<std::int64_t> checkpointer_ids;
  // Poolers and proxies between driver and server: process_id → comm.
  std::unordered_map<std::int64_t, std::string> middle_processes;
  bool is_path(std::int64_t id) const {
    return id == driver_process_id || backend_process_ids.contains(id) ||
           middle_processes.contains(id);
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

// Poolers and proxies on the query path (see ExplainOptions), and — when the
// driver's backend pids were a pooler's — the server's client backends seen
// by ASH in [A, B) as this run's backends.
void find_middle_processes(SQLite::Database& db, const ExplainOptions& opt, QueryPath& qp,
                           std::int64_t A, std::int64_t B, std::vector<std::string>& notes) {
  std::vector<std::string> names = opt.path_process_names;
  const bool auto_detect =
      names.empty() && !qp.backend_pids.empty() && qp.backend_process_ids.empty();
  if (auto_detect) names = {"pgbouncer", "pgcat", "odyssey", "pgpool"};
  SQLite::Statement st(db,
                       "SELECT DISTINCT p.process_id, p.comm FROM process p JOIN process_sample ps "
                       "ON ps.process_id = p.process_id JOIN sample s ON s.sample_id = "
                       "ps.sample_id WHERE p.comm = ?1 AND s.time_ns > ?2 AND s.time_ns <= ?3");
  std::set<std::string> found;
  for (const auto& name : names) {
    st.bind(1, name);
    st.bind(2, A);
    st.bind(3, B);
    while (st.executeStep()) {
      qp.middle_processes.emplace(st.getColumn(0).getInt64(), st.getColumn(1).getString());
      found.insert(name);
    }
    st.reset();
  }
  for (const auto& name : opt.path_process_names) {
    if (!found.contains(name)) {
      notes.push_back(fmt::format(
          "--path-process {}: no process of that name was sampled during the queries.", name));
    }
  }
  if (auto_detect && !found.empty()) {
    notes.push_back(fmt::format(
        "The driver's backend pids match no sampled process, so it talked to a pooler: {} taken "
        "as part of the query path (use --path-process to name it).",
        fmt::join(found, ", ")));
  }
  if (qp.middle_processes.empty() || !qp.backend_process_ids.empty()) return;
  // Behind a pooler the driver's backend pids are the pooler's. This run's
  // backends are the client backends (cmdline "postgres: USER DB HOST…") of
  // the postmaster whose processes ASH saw, sampled during the queries.
  qp.backend_pids.clear();
  SQLite::Statement st2(
      db,
      "SELECT DISTINCT p.process_id, p.pid FROM process p JOIN process_sample ps "
      "ON ps.process_id = p.process_id JOIN sample s ON s.sample_id = ps.sample_id "
      "WHERE s.time_ns > ?1 AND s.time_ns <= ?2 "
      "AND (p.cmdline LIKE 'postgres: % % [local]%' OR p.cmdline LIKE 'postgres: % % %(%)%') "
      "AND p.ppid IN (SELECT q.ppid FROM process q WHERE q.pid IN "
      "(SELECT DISTINCT pid FROM pg_activity_sample WHERE time_ns >= ?1 AND time_ns < ?2))");
  st2.bind(1, A);
  st2.bind(2, B);
  while (st2.executeStep()) {
    qp.backend_process_ids.insert(st2.getColumn(0).getInt64());
    qp.backend_pids.insert(st2.getColumn(1).getInt());
  }
  notes.push_back(
      "Behind a pooler: this run's backends are the client backends (by command line) of the "
      "server whose processes ASH sampled.");
}

// What each window accumulates while the streams pass.
struct WindowAcc {
  HostTotals host;
  std::int64_t sampler_cpu_ns = 0;
  std::int64_t driver_cpu_ns = 0;
  std::int64_t server_cpu_ns = 0;
  std::map<std::string, std::int64_t> path_cpu_ns;  // poolers/proxies by comm
  std::int64_t path_wait_ns = 0;  // queries waiting in the pooler (facts_pooler.cpp)
  std::int64_t run_delay_ns = 0;
  std::int64_t driver_run_delay_ns = 0;  // of which the driver's
  std::int64_t throttled_delay_ns = 0;   // run delay of path processes in throttled cgroups
  // Backend D rows while serving queries (attribution.h), by wchan; the whole
  // run's total also carries the per-window counted D-state time.
  std::map<std::string, std::int64_t> query_d_wchan_rows;
  std::optional<std::map<std::string, std::int64_t>> d_counted_by_wchan_ns;
  // Process rows whose CPU delta covered part of the window: without any,
  // its CPU and run delay are unknown, not 0 (sampling slower than the span).
  std::int64_t cpu_delta_rows = 0;
  std::int64_t ash_cpu_rows = 0;  // backends active with no wait event
  std::int64_t backend_d_rows = 0;
  std::map<std::string, std::int64_t> backend_d_wchan_rows;
  std::int64_t checkpointer_d_rows = 0;
  std::int64_t checkpointer_write_bytes = 0;
  std::map<int, std::int64_t> blocking_pid_rows;  // first blocking pid of Lock rows
  std::map<std::string, std::int64_t> ash_event_rows;
  std::map<std::string, std::int64_t> ash_class_rows;
};

// Window boundaries: window i covers [starts[i], ends[i]); the windows
// partition [A, B).
struct WindowIndex {
  std::vector<std::int64_t> starts;
  std::vector<std::int64_t> ends;
  // Time windows: their common length (the last may be shorter), so that
  // find() is a division; 0 for query windows (binary search).
  std::int64_t uniform_ns = 0;
  // Index of the window holding t, or -1 outside [A, B).
  std::ptrdiff_t find(std::int64_t t) const {
    if (starts.empty() || t < starts.front() || t >= ends.back()) return -1;
    if (uniform_ns > 0) return static_cast<std::ptrdiff_t>((t - starts.front()) / uniform_ns);
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
  if (const auto k = static_cast<std::size_t>(i); from >= wi.starts[k] && t <= wi.ends[k]) {
    add(k, value);  // the whole span in one window (value × span ÷ span)
    return;
  }
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

// Pass 1: the query table in its own order (it is clustered by start_ns), in
// one scan: the run's totals and percentiles (report.run, hist) and the
// windows' query figures. Holds one window's latencies (two at a window
// boundary). Time windows start at the first query sent (A) and are grown as
// queries arrive; finish_windows() closes them at B once it is known. A
// query is an error when query_error has its key: that (small) table is
// read alongside in the same key order and merged, which costs far less than
// a join's lookup per query. Skipped transactions (query_skipped: -R -L
// --skip-late, never sent) are only counted.
void scan_queries(SQLite::Database& db, const ExplainOptions& opt, Report& report,
                  LatencyHistogram& hist, std::int64_t& distinct_clients) {
  auto& s = report.run;
  auto& windows = report.windows;
  // A run still being written (or killed): each driver thread's rows reach
  // the file in its own commits, so past the earliest of the clients' latest
  // stored queries some clients' rows may be missing — the tail would read as
  // a throughput drop. Queries sent after that point are left out, but never
  // more than the last second before the latest stored query (a client held
  // up longer, e.g. in a lock wait when the run was killed, is part of the
  // story): a driver thread hands its rows over every 100 ms and the writer
  // commits them in order at most 250 ms later. A full scan, only for runs
  // without an end.
  std::int64_t cut_ns = std::numeric_limits<std::int64_t>::max();
  if (!s.end_ns) {
    schema::Cursor latest(db,
                          "SELECT min(m), max(m), count(*) FROM (SELECT max(start_ns) AS m FROM "
                          "query GROUP BY client_id)");
    if (latest.step() && latest.int64(2) > 1) {
      cut_ns = std::max(latest.int64(0), latest.int64(1) - kNsPerS);
    }
  }
  {
    schema::Cursor skipped(db, "SELECT count(*) FROM query_skipped WHERE start_ns <= ?1");
    skipped.bind(1, cut_ns);
    if (skipped.step()) s.skipped = skipped.int64(0);
  }
  // Both in primary-key order (start_ns, client_id, seq). lag_ns is read
  // only when the first query has one (-R runs give every query a lag; a
  // column read costs about 20 % of this scan).
  const bool with_lag =
      db.execAndGet(
            "SELECT coalesce((SELECT lag_ns IS NOT NULL FROM query ORDER BY start_ns "
            "LIMIT 1), 0)")
          .getInt() != 0;
  schema::Cursor row(db, with_lag ? "SELECT start_ns, latency_ns, client_id, seq, lag_ns FROM "
                                    "query WHERE start_ns <= ?1 ORDER BY start_ns, client_id, seq"
                                  : "SELECT start_ns, latency_ns, client_id, seq, NULL FROM query "
                                    "WHERE start_ns <= ?1 ORDER BY start_ns, client_id, seq");
  row.bind(1, cut_ns);
  schema::Cursor failed(db,
                        "SELECT start_ns, client_id, seq FROM query_error WHERE start_ns <= ?1 "
                        "ORDER BY start_ns, client_id, seq");
  failed.bind(1, cut_ns);
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
  std::optional<Key> next_failed;
  auto advance_failed = [&] {
    next_failed.reset();
    if (failed.step()) next_failed = Key{failed.int64(0), failed.int64(1), failed.int64(2)};
  };
  advance_failed();
  std::vector<std::int64_t> lat, prev_lat;
  std::int64_t A = 0, B = 0, latency_sum = 0, latency_max = 0;
  std::int64_t lag_sum = 0, lag_max = 0, lag_count = 0;  // -R
  // Query windows (--every N).
  Window cur;
  std::int64_t cur_end = 0;
  // Time windows: the one being filled, and whether there are too many.
  const auto w = opt.window_ns;
  std::int64_t open = -1, prev_open = -1;
  bool too_many = false;
  auto close_time_window = [&] {
    if (open < 0 || too_many) return;
    fill_latency_stats(lat, windows[static_cast<std::size_t>(open)]);
    std::swap(lat, prev_lat);
    lat.clear();
    prev_open = open;
  };
  // Distinct client ids (for files that do not record -c): small ids in a
  // bitmap, any others in a set.
  std::vector<bool> client_seen;
  std::unordered_set<std::int64_t> other_clients;
  while (row.step()) {
    if (const auto c = row.int64(2); c >= 0 && c < 65536) {
      if (static_cast<std::size_t>(c) >= client_seen.size()) client_seen.resize(c + 1);
      if (!client_seen[c]) {
        client_seen[c] = true;
        ++distinct_clients;
      }
    } else if (other_clients.insert(c).second) {
      ++distinct_clients;
    }
    const auto start = row.int64(0);
    const auto latency = row.int64(1);
    bool error = false;
    if (next_failed) {
      const Key key{start, row.int64(2), row.int64(3)};
      while (next_failed && *next_failed < key) advance_failed();  // no query row: not counted
      if (next_failed && *next_failed == key) {
        error = true;
        advance_failed();
      }
    }
    if (s.queries == 0) A = B = start;
    ++s.queries;
    B = std::max(B, start + latency);
    // As pgbench: throughput and latency count successful queries; a failed
    // one is counted apart (its latency may be unknown: 0 in a pgbench log).
    if (error) {
      ++s.errors;
    } else {
      latency_sum += latency;
      latency_max = s.queries - s.errors == 1 ? latency : std::max(latency_max, latency);
      hist.add(latency);
      if (!row.is_null(4)) {
        const auto lag = row.int64(4);
        lag_max = lag_count == 0 ? lag : std::max(lag_max, lag);
        lag_sum += lag;
        ++lag_count;
      }
    }
    if (opt.every_queries) {
      if (lat.empty() && cur.errors == 0) {
        cur.start_ns = start;
        cur_end = start;
      }
      cur_end = std::max(cur_end, start + latency);
      if (error) {
        ++cur.errors;
        continue;
      }
      lat.push_back(latency);
      if (static_cast<std::int64_t>(lat.size()) == *opt.every_queries) {
        fill_latency_stats(lat, cur);
        cur.duration_s = double(cur_end - cur.start_ns) / kNsPerS;
        if (cur_end > cur.start_ns) cur.tps = double(cur.queries) / cur.duration_s;
        windows.push_back(cur);
        lat.clear();
        cur = Window{};
      }
      continue;
    }
    const auto i = (start - A) / w;
    if (i != open) {
      close_time_window();
      open = i;
      if (i >= kMaxWindows) too_many = true;
      for (auto k = static_cast<std::int64_t>(windows.size()); !too_many && k <= i; ++k) {
        windows.emplace_back().start_ns = A + k * w;
      }
    }
    if (too_many) continue;
    if (error) {
      ++windows[static_cast<std::size_t>(i)].errors;
      continue;
    }
    lat.push_back(latency);
  }
  if (opt.every_queries) {
    if (!lat.empty() || cur.errors > 0) {
      fill_latency_stats(lat, cur);
      cur.duration_s = double(cur_end - cur.start_ns) / kNsPerS;
      if (cur_end > cur.start_ns) cur.tps = double(cur.queries) / cur.duration_s;
      windows.push_back(cur);
    }
  } else if (s.queries > 0) {
    B = std::max(B, A + 1);
    const auto count = std::max<std::int64_t>(1, (B - A + w - 1) / w);
    if (too_many || count > kMaxWindows) {
      throw_usage(
          fmt::format("cannot explain with --window {} ns: {} windows is too many (at most {})", w,
                      count, kMaxWindows));
    }
    if (open >= count) {
      // Queries sent exactly at B (latency 0) belong to the last window.
      auto& last = windows[static_cast<std::size_t>(count - 1)];
      const auto errors = last.errors + windows[static_cast<std::size_t>(open)].errors;
      if (prev_open == count - 1) lat.insert(lat.end(), prev_lat.begin(), prev_lat.end());
      windows.resize(static_cast<std::size_t>(count));
      last = Window{};
      last.start_ns = A + (count - 1) * w;
      last.errors = errors;
      open = count - 1;
    }
    close_time_window();
  }
  if (s.queries == 0) return;
  if (cut_ns != std::numeric_limits<std::int64_t>::max()) {
    s.queries_until_ns = cut_ns;
    schema::Cursor after(db, "SELECT count(*) FROM query WHERE start_ns > ?1");
    after.bind(1, cut_ns);
    if (after.step() && after.int64(0) > 0) {
      report.notes.push_back(fmt::format(
          "The run has no end (still running, or killed): {} queries sent after the last one "
          "stored for every client are left out (some clients' rows were not yet written).",
          after.int64(0)));
    }
  }
  if (const auto ok = s.queries - s.errors; ok > 0) {
    s.latency_mean_ms = double(latency_sum) / double(ok) / kNsPerMs;
    s.latency_max_ms = ms(latency_max);
  }
  if (lag_count > 0) {
    s.lag_mean_ms = double(lag_sum) / double(lag_count) / kNsPerMs;
    s.lag_max_ms = ms(lag_max);
  }
  s.query_start_ns = A;
  s.query_end_ns = B;
  if (B > A) s.tps = double(s.queries - s.errors) / (double(B - A) / kNsPerS);
}

// Closes the windows at B: time windows partition [A, B) (without queries
// they are made here, over the samples' span); query windows each end where
// the next starts, the last at B. Fills the window index.
void finish_windows(const ExplainOptions& opt, Report& report, WindowIndex& wi, std::int64_t A,
                    std::int64_t B) {
  auto& windows = report.windows;
  if (report.query_windows) {
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
      if (win.duration_s > 0) win.tps = double(win.queries) / win.duration_s;
    }
  }
  if (!report.query_windows) wi.uniform_ns = opt.window_ns;
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
// client backend), by poll time. With a sweep (per-query attribution), a
// backend's row counts only while it served one of its queries: within the
// poll's round trip, ± kAttributionSlackNs. The process pass drives it
// (run_until each row's tick) so that both share one sweep of the queries.
class AshScan {
 public:
  AshScan(SQLite::Database& db, const QueryPath& qp, bool use_pids, const WindowIndex& wi,
          std::vector<WindowAcc>& acc, Facts& f, std::int64_t A, std::int64_t B, QuerySweep* sweep,
          const BackendMap* backends, Attribution& att)
      : qp_(qp),
        use_pids_(use_pids),
        wi_(wi),
        acc_(acc),
        f_(f),
        sweep_(sweep),
        backends_(backends),
        att_(att),
        // Files from before the column existed have no blocking pids.
        st_(db, fmt::format("SELECT time_ns, pid, backend_type, state, wait_event_type, "
                            "wait_event, {}, {} FROM pg_activity_sample WHERE time_ns >= ?1 "
                            "AND time_ns < ?2 ORDER BY time_ns",
                            has_column(db, "pg_activity_sample", "blocking_pids") ? "blocking_pids"
                                                                                  : "NULL",
                            sweep ? "(SELECT t.duration_ns FROM ash_tick t WHERE t.ash_tick = "
                                    "pg_activity_sample.ash_tick)"
                                  : "NULL")) {
    st_.bind(1, A);
    st_.bind(2, B);
  }
  // Handles the rows polled before t (INT64_MAX: all that are left).
  void run_until(std::int64_t t) {
    while (!done_) {
      if (!pending_) {
        if (!st_.executeStep()) {
          done_ = true;
          return;
        }
        pending_ = true;
        pending_time_ns_ = st_.getColumn(0).getInt64();
      }
      if (pending_time_ns_ >= t) return;
      pending_ = false;
      handle();
    }
  }

 private:
  void handle() {
    if (use_pids_) {
      if (!qp_.backend_pids.contains(st_.getColumn(1).getInt())) return;
    } else {
      auto bt = st_.getColumn(2);
      if (!bt.isNull() && bt.getString() != "client backend") return;
    }
    auto state = opt_string(st_.getColumn(3));
    if (state && *state == "idle") return;
    if (sweep_) {
      const auto at = st_.getColumn(0).getInt64();
      const auto poll_ns = st_.getColumn(7).isNull() ? 0 : st_.getColumn(7).getInt64();
      sweep_->advance_to(at + poll_ns + kAttributionSlackNs);
      if (sweep_->busy_ns(backends_->slot_of_pid(st_.getColumn(1).getInt()),
                          at - kAttributionSlackNs, at + poll_ns + kAttributionSlackNs) == 0) {
        ++att_.ash_samples_outside;
        return;
      }
    }
    auto i = wi_.find(st_.getColumn(0).getInt64());
    if (i < 0) return;
    auto& a = acc_[static_cast<std::size_t>(i)];
    auto label = event_label(st_.getColumn(4), st_.getColumn(5));
    ++f_.ash_rows;
    // pg_stat_activity reads state from a snapshot but the wait event live,
    // so a backend that just finished shows 'active' with Client:ClientRead:
    // it is waiting for the client, not a server wait. Not a "top wait".
    const bool waiting_for_client =
        !st_.getColumn(4).isNull() && st_.getColumn(4).getString() == "Client";
    if (!waiting_for_client) {
      ++a.ash_event_rows[label];
      ++f_.ash_event_rows[label];
    }
    if (st_.getColumn(4).isNull()) {
      if (state && *state == "active") ++a.ash_cpu_rows;
      return;
    }
    auto cls = st_.getColumn(4).getString();
    if (!is_server_wait_class(cls)) return;
    if (cls == "Lock" && !st_.getColumn(6).isNull()) {
      const auto blockers = st_.getColumn(6).getString();
      const int first = std::atoi(blockers.c_str());
      if (first > 0) ++a.blocking_pid_rows[first];
    }
    ++a.ash_class_rows[cls];
    ++f_.ash_class_rows[cls];
  }

  const QueryPath& qp_;
  const bool use_pids_;
  const WindowIndex& wi_;
  std::vector<WindowAcc>& acc_;
  Facts& f_;
  QuerySweep* sweep_;
  const BackendMap* backends_;
  Attribution& att_;
  SQLite::Statement st_;
  bool pending_ = false;  // st_ holds a row not yet handled, polled at:
  std::int64_t pending_time_ns_ = 0;
  bool done_ = false;
};

// Per process, the single_thread scan's state: CPU per bucket as the rows
// pass in time order, and the hot buckets so far.
struct SingleThreadScan {
  std::int64_t bucket = -1;
  std::int64_t bucket_cpu_ns = 0;
  std::int64_t total_cpu_ns = 0;  // schedstat CPU of its rows in (A, B]
  SingleThreadCandidate cand;
};

// Pass 4: process rows, spread over the span each delta covers. Also finds
// the single_thread candidates: processes off the query path (poolers on it
// included) at kSingleThreadMinCores..kSingleThreadMaxCores in some bucket of
// bucket_ns; a row's delta covers the span before its tick, so a row at time
// t belongs to the bucket holding t − 1 ns. One scan of process_sample in its
// primary-key order (sample times from a sample_id-indexed vector, no join,
// no sort); memory holds one entry per process, not per row.
void read_processes(SQLite::Database& db, const QueryPath& qp, const WindowIndex& wi,
                    std::vector<WindowAcc>& acc, Facts& f, std::int64_t A, std::int64_t B,
                    std::int64_t clock_ticks_per_s, std::int64_t bucket_ns, int stallscope_pid,
                    QuerySweep* sweep, const BackendMap* backends, Attribution& att, AshScan* ash) {
  std::vector<std::int64_t> sample_time;
  std::int64_t first_sample_id = 0;
  {
    schema::Cursor ss(db, "SELECT sample_id, time_ns FROM sample ORDER BY sample_id");
    while (ss.step()) {
      const auto sid = ss.int64(0);
      if (sample_time.empty()) first_sample_id = sid;
      const auto k = static_cast<std::size_t>(sid - first_sample_id);
      if (k >= sample_time.size()) sample_time.resize(k + 1, INT64_MIN);
      sample_time[k] = ss.int64(1);
    }
  }
  std::int64_t from_id = first_sample_id;
  while (from_id - first_sample_id < static_cast<std::int64_t>(sample_time.size()) &&
         sample_time[static_cast<std::size_t>(from_id - first_sample_id)] <= A) {
    ++from_id;
  }
  // The role of each process, by process_id (dense, from 1): one array
  // lookup a row instead of hash lookups.
  enum : std::uint8_t {
    kDriver = 1,
    kBackend = 2,
    kMiddle = 4,
    kThrottled = 8,
    kCheckpointer = 16,
  };
  const auto max_id = db.execAndGet("SELECT coalesce(max(process_id), 0) FROM process").getInt64();
  const auto n_ids = static_cast<std::size_t>(std::max<std::int64_t>(0, max_id) + 1);
  std::vector<std::uint8_t> role(n_ids, 0);
  std::vector<const std::string*> middle_comm(n_ids, nullptr);
  auto mark = [&](std::int64_t id, std::uint8_t bit) {
    if (id >= 0 && static_cast<std::size_t>(id) < n_ids) role[static_cast<std::size_t>(id)] |= bit;
  };
  if (qp.driver_process_id) mark(*qp.driver_process_id, kDriver);
  for (auto id : qp.backend_process_ids) mark(id, kBackend);
  for (const auto& [id, comm] : qp.middle_processes) {
    mark(id, kMiddle);
    if (id >= 0 && static_cast<std::size_t>(id) < n_ids)
      middle_comm[static_cast<std::size_t>(id)] = &comm;
  }
  for (auto id : qp.throttled_process_ids) mark(id, kThrottled);
  for (auto id : qp.checkpointer_ids) mark(id, kCheckpointer);
  // Per-query attribution: each backend process's slot in the sweep.
  std::vector<int> slot_of;
  if (sweep) {
    slot_of.assign(n_ids, -1);
    SQLite::Statement pid_of(db, "SELECT pid FROM process WHERE process_id = ?");
    for (auto id : qp.backend_process_ids) {
      pid_of.bind(1, id);
      if (pid_of.executeStep() && id >= 0 && static_cast<std::size_t>(id) < n_ids)
        slot_of[static_cast<std::size_t>(id)] = backends->slot_of_pid(pid_of.getColumn(0).getInt());
      pid_of.reset();
    }
  }

  // Columns: sample_id, process_id, state, cpu_ns, run_delay_ns, span_ns,
  // wchan, utime_ticks, stime_ticks, write_bytes, majflt (process_scan.h).
  schema::ProcessSampleScan st(db, from_id);
  // The stallscope process also runs the writer and the samplers: where the
  // sampler recorded its threads, the driver's CPU is its ss-driver/N threads.
  if (qp.driver_process_id && has_column(db, "thread_sample", "comm")) {
    SQLite::Statement any(db,
                          "SELECT 1 FROM thread_sample WHERE process_id = ? AND comm LIKE "
                          "'ss-driver/%' AND cpu_ns IS NOT NULL LIMIT 1");
    any.bind(1, *qp.driver_process_id);
    f.driver_cpu_from_threads = any.executeStep();
  }
  std::vector<std::int64_t> cpu_by_process(n_ids, 0);
  std::vector<SingleThreadScan> scans(n_ids);
  // Query-path rows also feed the memory and kernel-wait facts
  // (add_path_process_row): role name and whether a futex wait counts.
  std::unordered_map<std::int64_t, std::pair<std::string, bool>> path_role;
  for (auto id : qp.backend_process_ids) path_role[id] = {"backend", false};
  for (const auto& [id, comm] : qp.middle_processes) path_role[id] = {"pooler:" + comm, true};
  if (qp.driver_process_id) path_role[*qp.driver_process_id] = {"driver", true};
  const auto hot_min = static_cast<std::int64_t>(kSingleThreadMinCores * double(bucket_ns));
  const auto hot_max = static_cast<std::int64_t>(kSingleThreadMaxCores * double(bucket_ns));
  auto flush = [&](SingleThreadScan& sc) {
    if (sc.bucket >= 0 && sc.bucket_cpu_ns >= hot_min && sc.bucket_cpu_ns <= hot_max) {
      if (sc.cand.hot_buckets == 0) sc.cand.first_hot_ns = A + sc.bucket * bucket_ns;
      ++sc.cand.hot_buckets;
      sc.cand.hot_cpu_ns += sc.bucket_cpu_ns;
      sc.cand.last_hot_end_ns = std::min(B, A + (sc.bucket + 1) * bucket_ns);
    }
    sc.bucket_cpu_ns = 0;
  };
  // Rows this long after B cannot cover any of [A, B) (every process gets a
  // row at least every 10 s).
  constexpr std::int64_t kMaxSpanNs = 60 * kNsPerS;
  while (st.step()) {
    const auto k = static_cast<std::size_t>(st.int64(0) - first_sample_id);
    if (k >= sample_time.size() || sample_time[k] == INT64_MIN) continue;
    const auto t = sample_time[k];
    if (t - kMaxSpanNs >= B) break;
    if (ash) ash->run_until(t);
    const auto id = st.int64(1);
    if (id < 0) continue;
    const auto uid = static_cast<std::size_t>(id);
    if (uid >= role.size()) {  // a row without a process row: no role
      role.resize(uid + 1, 0);
      middle_comm.resize(uid + 1, nullptr);
      cpu_by_process.resize(uid + 1, 0);
      scans.resize(uid + 1);
    }
    const auto r = role[uid];
    const bool driver = (r & kDriver) != 0;
    const bool backend = (r & kBackend) != 0;
    const bool middle = (r & kMiddle) != 0;
    // Per-query attribution: a backend's deltas count when its row's span
    // overlaps its queries; its state when it served one at the tick.
    bool in_queries = true;
    const int slot = sweep && backend && uid < slot_of.size() ? slot_of[uid] : -1;
    auto serving = [&] {
      return !sweep || sweep->busy_ns(slot, t - kAttributionSlackNs, t + kAttributionSlackNs) > 0;
    };
    if (sweep && backend) {
      sweep->advance_to(t + kAttributionSlackNs);
      const auto row_span = st.opt_int64(5);
      in_queries = row_span ? sweep->busy_ns(slot, t - *row_span, t) > 0 : serving();
    }
    if ((driver || backend || middle) && t <= B) {
      if (auto it = path_role.find(id); it != path_role.end()) {
        const auto state = st.text(2);
        add_path_process_row(
            f, it->second.first, it->second.second, state.empty() ? '?' : state[0],
            st.is_null(6) ? std::nullopt : std::optional<std::string>(std::string(st.text(6))),
            st.opt_int64(10));
      }
    }
    const auto cpu_col = st.opt_int64(3);
    if (t <= B && cpu_col && (!(driver || backend) || middle)) {
      auto& sc = scans[uid];
      const auto bucket = (t - 1 - A) / bucket_ns;
      if (bucket != sc.bucket) {
        flush(sc);
        sc.bucket = bucket;
      }
      sc.bucket_cpu_ns += *cpu_col;
      sc.total_cpu_ns += *cpu_col;
    }
    const auto span = st.opt_int64(5);
    if (span && t - *span >= B) continue;
    if (!span && t >= B) continue;
    std::int64_t cpu_in_span = 0;
    // schedstat (summed over every thread by the sampler) is exact; the
    // 10 ms /proc/PID/stat ticks are the fallback where schedstat was
    // unreadable.
    auto cpu = cpu_col;
    if (!cpu && !st.is_null(7) && !st.is_null(8) && clock_ticks_per_s > 0) {
      cpu = (st.int64(7) + st.int64(8)) * kNsPerS / clock_ticks_per_s;
    }
    const bool driver_from_threads = driver && f.driver_cpu_from_threads;
    if (cpu) {
      spread(wi, t, span, *cpu, [&](std::size_t w, std::int64_t v) {
        cpu_in_span += v;
        ++acc[w].cpu_delta_rows;
        if (driver && !driver_from_threads) acc[w].driver_cpu_ns += v;
        if (backend && in_queries) acc[w].server_cpu_ns += v;
        if (backend && !in_queries) att.backend_cpu_outside_ns += v;
        if (middle) acc[w].path_cpu_ns[*middle_comm[uid]] += v;
      });
    }
    cpu_by_process[uid] += cpu_in_span;
    f.all_cpu_ns += cpu_in_span;
    if (!driver && !backend && !middle) f.other_cpu_ns += cpu_in_span;  // poolers: path_cpu
    if (const auto delay = st.opt_int64(4)) {
      const bool driver_delay = driver && !driver_from_threads;
      const bool path_delay = driver_delay || (backend && in_queries) || middle;
      const bool throttled = (driver || backend || middle) && (r & kThrottled) != 0;
      spread(wi, t, span, *delay, [&](std::size_t w, std::int64_t v) {
        f.all_run_delay_ns += v;
        if (path_delay) acc[w].run_delay_ns += v;
        if (driver_delay) acc[w].driver_run_delay_ns += v;
        if (throttled) acc[w].throttled_delay_ns += v;
      });
    }
    if (!backend && (r & kCheckpointer) == 0) continue;
    const auto at = wi.find(t);
    if (at < 0) continue;
    const auto state = st.text(2);
    const bool in_d = state == "D";
    auto& a = acc[static_cast<std::size_t>(at)];
    if (backend && in_d) {
      ++f.backend_d_rows;
      const auto wchan = st.is_null(6) ? std::string("-") : std::string(st.text(6));
      ++f.backend_d_wchan_rows[wchan];
      ++a.backend_d_rows;
      ++a.backend_d_wchan_rows[wchan];
      if (serving()) ++a.query_d_wchan_rows[wchan];
    }
    if ((r & kCheckpointer) != 0) {
      if (in_d) ++a.checkpointer_d_rows;
      if (!st.is_null(9)) a.checkpointer_write_bytes += st.int64(9);
    }
  }
  if (f.driver_cpu_from_threads) {
    schema::Cursor th(db,
                      "SELECT sample_id, cpu_ns, run_delay_ns, span_ns FROM thread_sample "
                      "WHERE process_id = ?1 AND comm LIKE 'ss-driver/%' AND sample_id >= ?2 "
                      "ORDER BY sample_id");
    th.bind(1, *qp.driver_process_id);
    th.bind(2, from_id);
    while (th.step()) {
      const auto k = static_cast<std::size_t>(th.int64(0) - first_sample_id);
      if (k >= sample_time.size() || sample_time[k] == INT64_MIN) continue;
      const auto t = sample_time[k];
      const auto span = th.opt_int64(3);
      if ((span && t - *span >= B) || (!span && t >= B)) continue;
      if (auto cpu = th.opt_int64(1)) {
        spread(wi, t, span, *cpu,
               [&](std::size_t w, std::int64_t v) { acc[w].driver_cpu_ns += v; });
      }
      if (auto delay = th.opt_int64(2)) {
        spread(wi, t, span, *delay, [&](std::size_t w, std::int64_t v) {
          acc[w].run_delay_ns += v;
          acc[w].driver_run_delay_ns += v;
        });
      }
    }
  }
  std::vector<std::int64_t> hot_ids;
  for (std::size_t id = 0; id < scans.size(); ++id) {
    auto& sc = scans[id];
    if (sc.bucket < 0) continue;
    flush(sc);
    if (sc.cand.hot_buckets > 0) hot_ids.push_back(static_cast<std::int64_t>(id));
  }
  {
    SQLite::Statement proc(db, "SELECT pid, comm FROM process WHERE process_id = ?");
    for (auto id : hot_ids) {
      auto& sc = scans[static_cast<std::size_t>(id)];
      sc.cand.process.process_id = id;
      sc.cand.process.cpu_ns = sc.total_cpu_ns;
      sc.cand.bucket_ns = bucket_ns;
      proc.bind(1, id);
      if (proc.executeStep()) {
        sc.cand.process.pid = proc.getColumn(0).getInt();
        sc.cand.process.comm = proc.getColumn(1).getString();
      }
      proc.reset();
      if (sc.cand.process.pid != stallscope_pid) f.single_thread.push_back(sc.cand);
    }
  }
  // The processes off the query path that used the most CPU.
  std::vector<std::pair<std::int64_t, std::int64_t>> others;
  for (std::size_t id = 0; id < cpu_by_process.size(); ++id) {
    const auto cpu = cpu_by_process[id];
    if (!qp.is_path(static_cast<std::int64_t>(id)) && cpu > 0)
      others.emplace_back(static_cast<std::int64_t>(id), cpu);
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

// cgroup cpu.stat of the query path's cgroups (cgroup_sample, where the
// sampler recorded it): marks path processes whose cgroup was throttled in
// the span and keeps the most throttled cgroup's figures as evidence.
void read_cgroups(SQLite::Database& db, QueryPath& qp, Facts& f, std::int64_t A, std::int64_t B) {
  if (!has_column(db, "process", "cgroup") || !has_column(db, "cgroup_sample", "throttled_ns")) {
    return;
  }
  std::map<std::string, std::vector<std::int64_t>> path_cgroups;
  SQLite::Statement procs(db, "SELECT process_id, cgroup FROM process WHERE cgroup IS NOT NULL");
  while (procs.executeStep()) {
    const auto id = procs.getColumn(0).getInt64();
    if (qp.is_path(id)) path_cgroups[procs.getColumn(1).getString()].push_back(id);
  }
  SQLite::Statement st(db,
                       "SELECT count(*), sum(cs.nr_periods), sum(cs.nr_throttled), "
                       "sum(cs.throttled_ns) FROM cgroup_sample cs JOIN sample s "
                       "ON s.sample_id = cs.sample_id WHERE cs.cgroup = ?1 "
                       "AND s.time_ns > ?2 AND s.time_ns <= ?3");
  for (const auto& [cgroup, ids] : path_cgroups) {
    st.bind(1, cgroup);
    st.bind(2, A);
    st.bind(3, B);
    st.executeStep();
    if (st.getColumn(0).getInt64() > 0) {
      f.cgroup_data = true;
      const auto throttled = st.getColumn(2).isNull() ? 0 : st.getColumn(2).getInt64();
      const auto throttled_ns = st.getColumn(3).isNull() ? 0 : st.getColumn(3).getInt64();
      if (throttled > 0) qp.throttled_process_ids.insert(ids.begin(), ids.end());
      if (throttled > 0 && throttled_ns >= f.cgroup_throttled_ns) {
        f.throttled_cgroup = cgroup;
        f.cgroup_throttled_ns = throttled_ns;
        f.cgroup_nr_throttled = throttled;
        f.cgroup_nr_periods = st.getColumn(1).isNull() ? 0 : st.getColumn(1).getInt64();
      }
    }
    st.reset();
  }
}

// `pair`: explain_pair's second pass — parts are labelled by the host that
// measured them, and the driver's run delay is a part of its own.
Accounting make_accounting(int clients, std::int64_t wall_ns, const WindowAcc& a, const Facts& f,
                           bool pair) {
  Accounting acc;
  acc.clients = clients;
  acc.wall_ns = wall_ns;
  acc.client_ns = static_cast<std::int64_t>(clients) * wall_ns;
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
  // Backends in D state while serving the queries; what ASH did not already
  // count as an IO wait is a part of its own, split by wchan.
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
  if (f.pooler.available) acc.path_wait_ns = a.path_wait_ns;
  // No process CPU delta covers this span (e.g. --hz 0.1 on a short run):
  // the CPU and run-queue parts measured from this file's processes, and so
  // the remainder, cannot be accounted — left out rather than shown as 0.
  if (a.cpu_delta_rows == 0) {
    acc.cannot_account =
        fmt::format("no process sample with a CPU delta covers this span (samples every {:.1f} s)",
                    double(f.sample_period_ns) / kNsPerS);
  }
  const bool cpu_known = !acc.cannot_account;
  const auto parts_ns = acc.driver_cpu_ns + acc.path_cpu_ns + acc.path_wait_ns.value_or(0) +
                        acc.server_cpu_ns + acc.server_wait_ns + acc.server_d_state_ns +
                        acc.run_delay_ns;
  acc.remainder_ns = cpu_known ? std::max<std::int64_t>(0, acc.client_ns - parts_ns) : 0;
  acc.excess_ns = cpu_known ? std::max<std::int64_t>(0, parts_ns - acc.client_ns) : 0;
  auto part = [&](std::string name, std::int64_t ns, const char* host) {
    acc.parts.push_back({std::move(name), ns,
                         acc.client_ns > 0 ? double(ns) / double(acc.client_ns) : 0.0,
                         pair ? host : ""});
  };
  // Client + server: the driver's figures come from the client pass.
  if (cpu_known || pair) part("driver_cpu", acc.driver_cpu_ns, "client");
  // Path processes are sampled in the server file; pooler waits are polled
  // by the run (its file).
  if (cpu_known) {
    for (const auto& [comm, ns] : acc.path_cpu_by_comm_ns) part("path_cpu:" + comm, ns, "server");
  }
  if (acc.path_wait_ns) part(std::string("path_wait:") + kPoolerName, *acc.path_wait_ns, "client");
  // Without backend processes server CPU is the ASH estimate, still known.
  if (cpu_known || !f.backends_on_host) part("server_cpu", acc.server_cpu_ns, "server");
  for (const auto& [cls, ns] : acc.server_wait_by_class_ns)
    part("server_wait:" + cls, ns, "server");
  for (const auto& [wchan, ns] : acc.server_d_state_by_wchan_ns)
    part("server_d_state:" + wchan, ns, "server");
  if (pair) {
    if (cpu_known) part("run_queue", acc.run_delay_ns - acc.driver_run_delay_ns, "server");
    part("client_run_queue", acc.driver_run_delay_ns, "client");
  } else if (cpu_known) {
    part("run_queue", acc.run_delay_ns, "");
  }
  if (cpu_known) part("remainder", acc.remainder_ns, "");
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
  for (const auto& [k, v] : a.path_cpu_ns) total.path_cpu_ns[k] += v;
  total.path_wait_ns += a.path_wait_ns;
  total.run_delay_ns += a.run_delay_ns;
  total.driver_run_delay_ns += a.driver_run_delay_ns;
  total.cpu_delta_rows += a.cpu_delta_rows;
  for (const auto& [k, v] : a.query_d_wchan_rows) total.query_d_wchan_rows[k] += v;
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

namespace {
// The pgbench_aggregate rows' totals (an imported aggregate log), if any.
std::optional<PgbenchAggregateSummary> read_pgbench_aggregate(SQLite::Database& db) {
  using detail::kNsPerMs, detail::kNsPerS, detail::ms;
  const auto span = schema::pgbench_aggregate_span(db);
  if (!span) return std::nullopt;
  SQLite::Statement st(db,
                       "SELECT count(*), sum(transactions), sum(coalesce(serialization_failures, "
                       "0) + coalesce(deadlock_failures, 0)), sum(coalesce(skipped, 0)), "
                       "sum(latency_sum_ns), min(latency_min_ns), max(latency_max_ns), "
                       "sum(lag_sum_ns) FROM pgbench_aggregate");
  st.executeStep();
  PgbenchAggregateSummary a;
  a.intervals = st.getColumn(0).getInt64();
  a.transactions = st.getColumn(1).getInt64();
  a.failures = st.getColumn(2).getInt64();
  a.skipped = st.getColumn(3).getInt64();
  a.interval_ns = span->interval_ns;
  a.start_ns = span->start_ns;
  a.end_ns = span->end_ns;
  a.tps = double(a.transactions) / (double(a.end_ns - a.start_ns) / kNsPerS);
  if (a.transactions > 0) {
    a.latency_mean_ms = double(st.getColumn(4).getInt64()) / double(a.transactions) / kNsPerMs;
    if (!st.getColumn(7).isNull()) {
      a.lag_mean_ms = double(st.getColumn(7).getInt64()) / double(a.transactions) / kNsPerMs;
    }
  }
  if (!st.getColumn(5).isNull()) a.latency_min_ms = ms(st.getColumn(5).getInt64());
  if (!st.getColumn(6).isNull()) a.latency_max_ms = ms(st.getColumn(6).getInt64());
  return a;
}
// A file with pgbench aggregate intervals but no queries: each time window
// gets the transactions, failures and mean latency of the intervals that
// start in it (all files together), so its throughput shows.
void fill_windows_from_aggregates(SQLite::Database& db, Report& report) {
  using detail::kNsPerMs, detail::kNsPerS;
  SQLite::Statement st(db,
                       "SELECT interval_start_ns, transactions, latency_sum_ns, "
                       "coalesce(serialization_failures, 0) + coalesce(deadlock_failures, 0) FROM "
                       "pgbench_aggregate ORDER BY interval_start_ns");
  std::vector<std::int64_t> latency_sum(report.windows.size(), 0);
  std::size_t w = 0;
  while (st.executeStep()) {
    const auto start = st.getColumn(0).getInt64();
    while (w < report.windows.size() && start >= report.windows[w].end_ns) ++w;
    if (w == report.windows.size()) break;
    if (start < report.windows[w].start_ns) continue;
    report.windows[w].queries += st.getColumn(1).getInt64();
    latency_sum[w] += st.getColumn(2).getInt64();
    report.windows[w].errors += st.getColumn(3).getInt64();
  }
  for (std::size_t i = 0; i < report.windows.size(); ++i) {
    auto& win = report.windows[i];
    if (win.duration_s > 0) win.tps = double(win.queries) / win.duration_s;
    if (win.queries > 0)
      win.latency_mean_ms = double(latency_sum[i]) / double(win.queries) / kNsPerMs;
  }
}
}  // namespace

Report explain(schema::Store& store, const ExplainOptions& options) {
  using namespace detail;
  auto& db = store.db();
  if (options.window_ns <= 0) throw_usage("cannot explain: --window must be positive");
  if (options.every_queries && *options.every_queries <= 0) {
    throw_usage("cannot explain: --every must be a positive number of queries");
  }
  try {
    Report report;
    PassClock clock;
    auto run = read_run(db);
    report.run = run.summary;
    LatencyHistogram hist;
    std::int64_t query_clients = 0;
    scan_queries(db, options, report, hist, query_clients);
    clock.lap("queries");

    Facts f;
    f.has_queries = report.run.queries > 0;
    if (report.run.queries > 0 && 2 * report.run.errors >= report.run.queries) {
      report.notes.push_back(fmt::format(
          "{} of {} queries failed: throughput and latency count only the {} that succeeded "
          "(SELECT sqlstate, count(*), min(error) FROM query_error GROUP BY 1).",
          report.run.errors, report.run.queries, report.run.queries - report.run.errors));
    }
    if (const auto& r = report.run; r.lag_mean_ms && r.latency_mean_ms && *r.latency_mean_ms > 0 &&
                                    *r.lag_mean_ms >= 0.5 * *r.latency_mean_ms) {
      report.notes.push_back(fmt::format(
          "The fixed rate (-R) was not kept: the mean schedule lag, {:.3f} ms (max {:.3f} ms), is "
          "{:.0f} % of the mean latency, {:.3f} ms, which counts from the scheduled start. The "
          "clients could not send as fast as scheduled; tps {:.1f} is what was served.",
          *r.lag_mean_ms, r.lag_max_ms.value_or(0), 100.0 * *r.lag_mean_ms / *r.latency_mean_ms,
          *r.latency_mean_ms, r.tps.value_or(0)));
    }
    report.pgbench_aggregate = read_pgbench_aggregate(db);
    if (report.pgbench_aggregate && !f.has_queries) {
      report.notes.push_back(
          "Throughput and latency come from imported pgbench aggregate intervals: no "
          "percentiles, windows of queries or per-query attribution (they need a "
          "per-transaction log, pgbench -l without --aggregate-interval).");
    }
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

    clock.lap("periods, span");
    auto qp = find_query_path(db, run);
    // Client + server: the driver ran on the client host; its figures come
    // from the client pass, never from the server file's processes.
    const bool pair = options.client_driver_cpu_ns.has_value();
    if (pair) qp.driver_process_id.reset();
    const bool backends_unsampled = qp.backend_process_ids.empty();
    if (f.has_queries) find_middle_processes(db, options, qp, A, B, report.notes);
    // Per-query attribution (attribution.h) where each query's backend is
    // known; behind a pooler (its pids are the pooler's) or without backend
    // pids (an imported pgbench log), host-wide figures.
    Attribution att;
    std::optional<BackendMap> backends;
    if (f.has_queries) {
      backends.emplace(store);
      att.queries = report.run.queries;
      if (backends_unsampled && !qp.middle_processes.empty()) {
        att.method = AttributionMethod::host_wide;
        att.reason =
            "behind a pooler a query's server backend is not known: every client backend of the "
            "server counts over the whole query span";
      } else if (backends->empty()) {
        att.method = AttributionMethod::host_wide;
        const bool imported =
            db.execAndGet("SELECT command_line LIKE '%import-pgbench%' FROM run").getInt() != 0;
        att.reason = fmt::format(
            "the file has no backend identity{}: every client backend's samples count over the "
            "whole query span",
            imported ? " (imported pgbench log)"
                     : " (no driver connection recorded a backend pid)");
      } else if (!backends->queries_name_connections()) {
        att.method = AttributionMethod::host_wide;
        att.reason =
            "the queries do not name their driver connection (query.connection): every sample of "
            "the run's backends counts over the whole query span";
      } else {
        att.method = AttributionMethod::per_query;
      }
    }
    const bool per_query = att.method == AttributionMethod::per_query;
    f.backends_on_host = !qp.backend_process_ids.empty();
    const bool use_pids = !qp.backend_pids.empty();

    clock.lap("query path");
    read_cgroups(db, qp, f, A, B);
    {
      SQLite::Statement ck(db,
                           "SELECT process_id FROM process WHERE cmdline LIKE "
                           "'postgres: checkpointer%'");
      while (ck.executeStep()) qp.checkpointer_ids.insert(ck.getColumn(0).getInt64());
    }

    WindowIndex wi;
    finish_windows(options, report, wi, A, B);
    if (report.pgbench_aggregate && !f.has_queries) fill_windows_from_aggregates(db, report);
    clock.lap("cgroups, checkpointer");
    if (auto p50 = hist.percentile(0.50)) report.run.latency_p50_ms = ms(*p50);
    if (auto p99 = hist.percentile(0.99)) report.run.latency_p99_ms = ms(*p99);
    std::vector<WindowAcc> acc(report.windows.size());
    read_host(db, wi, acc, A, B);
    clock.lap("host samples");
    // Per-query attribution: one sweep of the queries, shared by the ASH and
    // process passes, which run interleaved in time.
    std::optional<QuerySweep> sweep;
    if (per_query) {
      sweep.emplace(store, *backends, store.path(),
                    report.run.queries_until_ns.value_or(std::numeric_limits<std::int64_t>::max()));
    }
    AshScan ash(db, qp, use_pids, wi, acc, f, A, B, sweep ? &*sweep : nullptr,
                backends ? &*backends : nullptr, att);
    if (!sweep) ash.run_until(INT64_MAX);
    clock.lap("ash");
    read_processes(
        db, qp, wi, acc, f, A, B, db.execAndGet("SELECT clock_ticks_per_s FROM run").getInt64(),
        report.query_windows ? kNsPerS : options.window_ns, run.stallscope_pid,
        sweep ? &*sweep : nullptr, backends ? &*backends : nullptr, att, sweep ? &ash : nullptr);
    if (sweep) {
      ash.run_until(INT64_MAX);
      sweep->finish();
      att.joined_queries = sweep->joined();
      sweep.reset();
    }
    if (f.has_queries) report.attribution = att;
    clock.lap(per_query ? "ash + processes" : "processes");
    read_path_facts(store, {qp.driver_process_id, qp.backend_process_ids, qp.middle_processes}, f,
                    A, B);
    read_pooler_facts(store, report.windows, f, A, B, report.notes);
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i].path_wait_ns = f.pooler.window_wait_ns[i];

    const int clients = report.run.clients.value_or(static_cast<int>(query_clients));
    WindowAcc total;
    f.window_wait_share.resize(report.windows.size());
    f.window_steal_share.resize(report.windows.size());
    f.window_throttle_share.resize(report.windows.size());
    std::vector<WindowSignals> signals(report.windows.size());
    std::int64_t perturbed_windows = 0;
    for (std::size_t i = 0; i < report.windows.size(); ++i) {
      auto& w = report.windows[i];
      if (options.client_driver_cpu_ns && i < options.client_driver_cpu_ns->size()) {
        // Client + server: the driver ran on the client host; make_accounting
        // subtracts this file's sampler CPU, so add it back.
        acc[i].driver_cpu_ns = (*options.client_driver_cpu_ns)[i] + acc[i].sampler_cpu_ns;
      }
      if (options.client_driver_run_delay_ns && i < options.client_driver_run_delay_ns->size()) {
        acc[i].driver_run_delay_ns = (*options.client_driver_run_delay_ns)[i];
        acc[i].run_delay_ns += acc[i].driver_run_delay_ns;
      }
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
      if (w.end_ns > w.start_ns) {
        w.sampler_core_share = double(a.sampler_cpu_ns) / double(w.end_ns - w.start_ns);
        w.perturbed = *w.sampler_core_share > kPerturbationMaxCoreShare;
        if (w.perturbed) ++perturbed_windows;
      }
      const auto wall = w.end_ns - w.start_ns;
      // Query-path run delay from a CPU quota: measured through the cgroup
      // where the sampler recorded it, else inferred (runnable while idle).
      std::int64_t throttled_ns = 0;
      if (f.cgroup_data) {
        throttled_ns = a.throttled_delay_ns;
      } else if (a.host.cpu_rows > 0 && a.host.busy_share() < kThrottleMaxHostBusyShare) {
        throttled_ns = a.run_delay_ns;
      }
      f.throttled_run_delay_ns += throttled_ns;
      {
        auto& g = signals[i];
        g.client_ns = static_cast<std::int64_t>(clients) * wall;
        g.backend_d_rows = a.backend_d_rows;
        for (const auto& [wchan, n] : a.backend_d_wchan_rows) {
          if (n > g.top_d_wchan_rows)
            std::tie(g.top_d_wchan, g.top_d_wchan_rows) = std::tie(wchan, n);
        }
        g.checkpointer_d_rows = a.checkpointer_d_rows;
        g.checkpointer_write_bytes = a.checkpointer_write_bytes;
        auto rows_of = [&](const std::map<std::string, std::int64_t>& m, const std::string& k) {
          auto it = m.find(k);
          return it == m.end() ? std::int64_t{0} : it->second;
        };
        const auto walwrite = rows_of(a.ash_event_rows, "LWLock:WALWrite");
        const bool io_evidence = rows_of(f.ash_class_rows, "IO") > 0 || f.backend_d_rows > 0;
        g.io_rows = rows_of(a.ash_class_rows, "IO") + (io_evidence ? walwrite : 0);
        g.lock_rows = rows_of(a.ash_class_rows, "Lock");
        g.lwlock_rows = rows_of(a.ash_class_rows, "LWLock") - (io_evidence ? walwrite : 0);
        for (const auto& [pid, n] : a.blocking_pid_rows) {
          if (n > g.top_blocking_pid_rows)
            std::tie(g.top_blocking_pid, g.top_blocking_pid_rows) = std::tie(pid, n);
        }
        g.throttled_ns = throttled_ns;
        g.run_delay_ns = std::max<std::int64_t>(0, a.run_delay_ns - throttled_ns);
        g.steal_share = f.window_steal_share[i];
        g.ash_period_ns = f.ash_period_ns;
        g.sample_period_ns = f.sample_period_ns;
      }
      if (f.has_queries && clients > 0 && wall > 0) {
        f.window_throttle_share[i] = double(throttled_ns) / (double(clients) * double(wall));
      }
      if (f.has_queries) {
        w.accounting = make_accounting(clients, wall, a, f, pair);
        auto& counted = total.d_counted_by_wchan_ns;
        if (!counted) counted.emplace();
        for (const auto& [wchan, ns] : w.accounting->server_d_state_by_wchan_ns)
          (*counted)[wchan] += ns;
        for (const auto& [cls, ns] : w.accounting->server_wait_by_class_ns) {
          f.window_wait_share[i][cls] =
              w.accounting->client_ns > 0 ? double(ns) / double(w.accounting->client_ns) : 0;
        }
      } else {
        for (const auto& [cls, rows] : a.ash_class_rows) f.window_wait_share[i][cls] = double(rows);
      }
    }
    f.host = total.host;
    if (f.has_queries) report.accounting = make_accounting(clients, B - A, total, f, pair);

    // Notes: sampling limits and caveats.
    if (perturbed_windows > 0) {
      report.notes.push_back(fmt::format(
          "{} of {} windows are flagged as perturbed: the sampler itself used more than {:.0f}% "
          "of a core there, so its own cost may have shaped what it measured.",
          perturbed_windows, report.windows.size(), 100 * kPerturbationMaxCoreShare));
    }
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
      if (!qp.driver_process_id && !options.client_driver_cpu_ns) {
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
    clock.lap("path facts, windows");
    report.findings = find(report, f);
    // The blocker's latest query text (files from before pg_query_text: none).
    const bool texts = has_column(db, "pg_query_text", "query") &&
                       has_column(db, "pg_activity_sample", "query_text_id");
    SQLite::Statement blocker(
        db, texts ? "SELECT coalesce(t.query, ''), coalesce(a.state, '') FROM "
                    "pg_activity_sample a LEFT JOIN pg_query_text t ON "
                    "t.query_text_id = a.query_text_id WHERE a.pid = ?1 AND "
                    "a.time_ns <= ?2 ORDER BY a.time_ns DESC LIMIT 1"
                  : "SELECT '', coalesce(state, '') FROM pg_activity_sample WHERE pid = ?1 AND "
                    "time_ns <= ?2 ORDER BY time_ns DESC LIMIT 1");
    {
      // Connection-loss errors per window with errors (a range read each).
      SQLite::Statement lost(db,
                             "SELECT sqlstate, count(*) FROM query_error WHERE start_ns >= ?1 AND "
                             "start_ns < ?2 AND (sqlstate LIKE '08%' OR sqlstate IN ('57P01', "
                             "'57P02', '57P03')) GROUP BY sqlstate ORDER BY 2 DESC");
      for (std::size_t i = 0; i < report.windows.size() && i < signals.size(); ++i) {
        const auto& w = report.windows[i];
        if (w.errors == 0) continue;
        lost.reset();
        lost.bind(1, static_cast<int64_t>(w.start_ns));
        lost.bind(2, static_cast<int64_t>(w.end_ns));
        while (lost.executeStep()) {
          if (signals[i].top_connection_sqlstate.empty()) {
            signals[i].top_connection_sqlstate = lost.getColumn(0).getString();
          }
          signals[i].connection_errors += lost.getColumn(1).getInt64();
        }
      }
    }
    report.stalls = find_stalls(report, signals, [&](int pid, std::int64_t t) {
      blocker.reset();
      blocker.bind(1, pid);
      blocker.bind(2, t);
      if (!blocker.executeStep()) return std::string();
      auto q = blocker.getColumn(0).getString();
      auto state = blocker.getColumn(1).getString();
      return state.empty() ? q : fmt::format("{} ({})", q, state);
    });
    clock.lap("findings, stalls");
    return report;
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite, fmt::format("cannot read {}: {}", store.path(), e.what()),
                e.getExtendedErrorCode());
  }
}

}  // namespace stallscope::correlate
