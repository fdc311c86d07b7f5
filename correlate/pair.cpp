// explain_pair: a client run file with a server record file.
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>

#include "common/error.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"

namespace stallscope::correlate {
namespace {

// Tables (and views) of the server file that the analysis reads; each is shadowed by a
// temporary view of the attached file while the server-side pass runs.
constexpr const char* kServerTables[] = {
    "sample", "host_sample", "process", "process_sample", "pg_activity_sample", "ash_tick",
    "cgroup_sample", "pg_query_text", "thread_sample", "host_memory_sample", "disk_sample",
    // The stored forms behind the process_sample and thread_sample views,
    // which explain's process scan (schema/process_scan.h) reads directly.
    "process_tick", "process_io_sample", "wchan", "thread_tick", "thread_comm"};

struct Span {
  std::int64_t from_ns = 0, to_ns = 0;
};

// Wall-clock columns of the server tables (points in time, not durations):
// the views shift these to the client's clock.
bool is_time_column(std::string_view table, std::string_view column) {
  if (table == "sample" || table == "ash_tick") return column == "time_ns";
  if (table == "process") return column == "start_ns";
  if (table == "pg_query_text") return column == "first_time_ns";
  if (table == "pg_activity_sample") {
    return column == "time_ns" || column == "backend_start_ns" || column == "xact_start_ns" ||
           column == "query_start_ns" || column == "state_change_ns";
  }
  return false;
}

// One clock_offset row of the run file.
struct Estimate {
  std::int64_t time_ns = 0;    // client clock
  std::int64_t offset_ns = 0;  // server − client
  std::int64_t uncertainty_ns = 0;
};

std::vector<Estimate> read_estimates(SQLite::Database& db) {
  std::vector<Estimate> e;
  if (db.execAndGet("SELECT count(*) FROM main.sqlite_master WHERE type = 'table' AND name = "
                    "'clock_offset'")
          .getInt64() == 0) {
    return e;
  }
  SQLite::Statement st(db,
                       "SELECT time_ns, offset_ns, uncertainty_ns FROM main.clock_offset "
                       "ORDER BY time_ns");
  while (st.executeStep()) {
    e.push_back(
        {st.getColumn(0).getInt64(), st.getColumn(1).getInt64(), st.getColumn(2).getInt64()});
  }
  return e;
}

// Server times from which estimate i (i ≥ 1) is the nearest: half way between
// estimates i − 1 and i on the client clock, moved to the server's clock.
std::vector<std::int64_t> boundaries(const std::vector<Estimate>& e) {
  std::vector<std::int64_t> m;
  for (std::size_t i = 1; i < e.size(); ++i) {
    m.push_back(e[i - 1].time_ns / 2 + e[i].time_ns / 2 + e[i - 1].offset_ns);
  }
  return m;
}

// A server time on the client's clock (no estimates: unchanged).
std::int64_t to_client_ns(const std::vector<Estimate>& e, std::int64_t server_ns) {
  if (e.empty()) return server_ns;
  const auto m = boundaries(e);
  std::size_t i = 0;
  while (i < m.size() && server_ns >= m[i]) ++i;
  return server_ns - e[i].offset_ns;
}

// The same mapping as SQL over `column` (NULL stays NULL).
std::string to_client_sql(const std::vector<Estimate>& e, const std::string& column) {
  if (e.empty()) return column;
  if (e.size() == 1) return fmt::format("({} - ({}))", column, e[0].offset_ns);
  const auto m = boundaries(e);
  std::string sql = "(CASE";
  for (std::size_t i = 0; i < m.size(); ++i) {
    sql += fmt::format(" WHEN {0} < {1} THEN {0} - ({2})", column, m[i], e[i].offset_ns);
  }
  sql += fmt::format(" ELSE {} - ({}) END)", column, e.back().offset_ns);
  return sql;
}

std::string time_text(std::int64_t ns) {
  return fmt::format("{:.3f}", double(ns) / 1e9);
}

// Mean of the windows' host shares, over windows that have them.
HostSummary summarise(const Report& r, std::string role) {
  HostSummary h{std::move(role), r.run.host, r.run.cores, std::nullopt, std::nullopt, std::nullopt};
  double busy = 0, iowait = 0, steal = 0, weight = 0;
  for (const auto& w : r.windows) {
    if (!w.cpu_busy_pct) continue;
    const double d = double(w.end_ns - w.start_ns);
    busy += *w.cpu_busy_pct * d;
    iowait += w.cpu_iowait_pct.value_or(0) * d;
    steal += w.cpu_steal_pct.value_or(0) * d;
    weight += d;
  }
  if (weight > 0) {
    h.cpu_busy_pct = busy / weight;
    h.cpu_iowait_pct = iowait / weight;
    h.cpu_steal_pct = steal / weight;
  }
  return h;
}

// 9840.4 → "9,840".
std::string grouped(double v) {
  const auto digits = fmt::format("{:.0f}", std::abs(v));
  std::string out(v < 0 ? "-" : "");
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// The poolers on a run's query path (its path_cpu parts), "" without one.
std::string pooler_of(const Report& r) {
  if (!r.accounting || r.accounting->path_cpu_by_comm_ns.empty()) return "";
  return r.accounting->path_cpu_by_comm_ns.front().first;
}

RunComparison::Side side_of(const Report& r, const std::string& path) {
  RunComparison::Side s;
  s.path = path;
  s.queries = r.run.queries;
  s.clients = r.run.clients;
  s.tps = r.run.tps;
  s.latency_mean_ms = r.run.latency_mean_ms;
  s.latency_p99_ms = r.run.latency_p99_ms;
  const auto pooler = pooler_of(r);
  s.label = pooler.empty() ? "direct" : "through " + pooler;
  return s;
}

}  // namespace

RunComparison compare_runs(const Report& run, const std::string& run_path, const Report& baseline,
                           const std::string& baseline_path) {
  RunComparison c;
  c.run = side_of(run, run_path);
  c.baseline = side_of(baseline, baseline_path);
  if (c.run.label == c.baseline.label) {
    c.run.label = run_path;
    c.baseline.label = baseline_path;
  }
  if (c.run.tps && c.baseline.tps && *c.baseline.tps > 0) {
    c.tps_ratio = *c.run.tps / *c.baseline.tps;
    c.tps_change_pct = (*c.tps_ratio - 1) * 100;
  }
  auto tps = [](const std::optional<double>& v) {
    return v ? grouped(*v) + " tps" : std::string("no tps");
  };
  c.summary = fmt::format("{}: {} vs {} {}", c.run.label, tps(c.run.tps), tps(c.baseline.tps),
                          c.baseline.label);
  if (c.tps_change_pct) c.summary += fmt::format(" ({:+.0f}%)", *c.tps_change_pct);
  return c;
}

Report explain_pair(schema::Store& client, const std::string& server_path,
                    const ExplainOptions& options) {
  auto& db = client.db();
  // Pass 1: the client file alone (driver CPU, client host).
  const Report client_side = explain(client, options);
  if (client_side.run.queries == 0 || !client_side.run.query_start_ns) {
    throw_usage(
        fmt::format("cannot explain {} with {}: the first file holds no queries (give the "
                    "run file first, then the server's record file)",
                    client.path(), server_path));
  }
  const Span queries{*client_side.run.query_start_ns, *client_side.run.query_end_ns};
  try {
    SQLite::Statement attach(db, "ATTACH DATABASE ?1 AS srv");
    attach.bind(1, server_path);
    attach.exec();
  } catch (const SQLite::Exception& e) {
    throw_usage(fmt::format("cannot open {}: {}", server_path, e.what()));
  }
  struct Cleanup {
    SQLite::Database& db;
    ~Cleanup() {
      for (const char* t : kServerTables) {
        try {
          db.exec(fmt::format("DROP VIEW IF EXISTS temp.{}", t));
        } catch (...) {
        }
      }
      try {
        db.exec("DETACH DATABASE srv");
      } catch (...) {
      }
    }
  } cleanup{db};
  Span server;
  std::string server_host;
  const auto estimates = read_estimates(db);
  try {
    SQLite::Statement st(db, "SELECT min(time_ns), max(time_ns) FROM srv.sample");
    st.executeStep();
    if (st.getColumn(0).isNull()) {
      throw_usage(fmt::format("cannot explain with {}: it holds no samples", server_path));
    }
    server = {to_client_ns(estimates, st.getColumn(0).getInt64()),
              to_client_ns(estimates, st.getColumn(1).getInt64())};
    server_host = db.execAndGet("SELECT host FROM srv.run").getString();
  } catch (const SQLite::Exception& e) {
    throw_usage(
        fmt::format("cannot explain with {}: not a stallscope file ({})", server_path, e.what()));
  }
  if (server.to_ns < queries.from_ns || server.from_ns > queries.to_ns) {
    throw_usage(fmt::format(
        "cannot explain {} with {}: their time ranges do not overlap (queries {} .. {} s, server "
        "samples {} .. {} s since the epoch)",
        client.path(), server_path, time_text(queries.from_ns), time_text(queries.to_ns),
        time_text(server.from_ns), time_text(server.to_ns)));
  }
  for (const char* t : kServerTables) {
    SQLite::Statement has(
        db, "SELECT count(*) FROM srv.sqlite_master WHERE type IN ('table', 'view') AND name = ?1");
    has.bind(1, t);
    has.executeStep();
    if (has.getColumn(0).getInt64() == 0) continue;
    std::string columns;
    SQLite::Statement info(db, "SELECT name FROM pragma_table_info(?1, 'srv') ORDER BY cid");
    info.bind(1, t);
    while (info.executeStep()) {
      const auto name = info.getColumn(0).getString();
      if (!columns.empty()) columns += ", ";
      columns +=
          is_time_column(t, name)
              ? fmt::format("{} AS \"{}\"", to_client_sql(estimates, "\"" + name + "\""), name)
              : "\"" + name + "\"";
    }
    db.exec(fmt::format("CREATE TEMP VIEW {0} AS SELECT {1} FROM srv.{0}", t, columns));
  }
  // Pass 2: the same windows, with the server's host, processes and ASH and
  // the client's driver CPU per window.
  ExplainOptions o = options;
  std::vector<std::int64_t> driver, driver_delay;
  for (const auto& w : client_side.windows) {
    driver.push_back(w.accounting ? w.accounting->driver_cpu_ns : 0);
    driver_delay.push_back(w.accounting ? w.accounting->driver_run_delay_ns : 0);
  }
  o.client_driver_cpu_ns = std::move(driver);
  o.client_driver_run_delay_ns = std::move(driver_delay);
  Report r = explain(client, o);
  r.hosts.push_back(summarise(client_side, "client"));
  auto s = summarise(r, "server");
  s.host = server_host;
  s.cores = static_cast<int>(db.execAndGet("SELECT cores FROM srv.run").getInt64());
  r.hosts.push_back(std::move(s));
  ClockAlignment clock;
  clock.estimates = static_cast<std::int64_t>(estimates.size());
  if (!estimates.empty()) {
    const auto middle = queries.from_ns / 2 + queries.to_ns / 2;
    const auto nearest = std::min_element(
        estimates.begin(), estimates.end(), [&](const Estimate& x, const Estimate& y) {
          return std::abs(x.time_ns - middle) < std::abs(y.time_ns - middle);
        });
    clock.offset_ns = nearest->offset_ns;
    clock.uncertainty_ns = nearest->uncertainty_ns;
    const auto [lo, hi] = std::minmax_element(
        estimates.begin(), estimates.end(),
        [](const Estimate& x, const Estimate& y) { return x.offset_ns < y.offset_ns; });
    clock.offset_min_ns = lo->offset_ns;
    clock.offset_max_ns = hi->offset_ns;
  }
  r.clock = clock;
  r.notes.insert(
      r.notes.begin(),
      estimates.empty()
          ? fmt::format(
                "Client + server: driver CPU from {} (host {}), host, process and ASH "
                "figures from {} (host {}). {} holds no clock-offset estimate: the server's "
                "times are used unshifted (both hosts are assumed to share one clock).",
                client.path(), client_side.run.host, server_path, server_host, client.path())
          : fmt::format("Client + server: driver CPU from {} (host {}), host, process and ASH "
                        "figures from {} (host {}), whose times are moved to the client's clock "
                        "by the nearest of {} clock-offset estimates (server - client {:+.3f} ms "
                        "+/- {:.3f} ms at the middle of the run).",
                        client.path(), client_side.run.host, server_path, server_host,
                        estimates.size(), double(*clock.offset_ns) / 1e6,
                        double(*clock.uncertainty_ns) / 1e6));
  if (server.from_ns > queries.from_ns || server.to_ns < queries.to_ns) {
    r.notes.push_back(
        fmt::format("The server file covers only part of the queries ({} .. {} s of {} .. {} s).",
                    time_text(server.from_ns), time_text(server.to_ns), time_text(queries.from_ns),
                    time_text(queries.to_ns)));
  }
  return r;
}

}  // namespace stallscope::correlate
