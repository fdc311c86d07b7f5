// explain_pair: a client run file with a server record file.
#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>

#include "common/error.h"
#include "correlate/correlate.h"
#include "correlate/detail.h"

namespace stallscope::correlate {
namespace {

// Tables of the server file that the analysis reads; each is shadowed by a
// temporary view of the attached file while the server-side pass runs.
constexpr const char* kServerTables[] = {
    "sample",     "host_sample",   "process",       "process_sample", "pg_activity_sample",
    "ash_tick",   "cgroup_sample", "pg_query_text", "thread_sample",  "host_memory_sample",
    "disk_sample"};

struct Span {
  std::int64_t from_ns = 0, to_ns = 0;
};

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

}  // namespace

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
  try {
    SQLite::Statement st(db, "SELECT min(time_ns), max(time_ns) FROM srv.sample");
    st.executeStep();
    if (st.getColumn(0).isNull()) {
      throw_usage(fmt::format("cannot explain with {}: it holds no samples", server_path));
    }
    server = {st.getColumn(0).getInt64(), st.getColumn(1).getInt64()};
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
        db, "SELECT count(*) FROM srv.sqlite_master WHERE type = 'table' AND name = ?1");
    has.bind(1, t);
    has.executeStep();
    if (has.getColumn(0).getInt64() > 0) {
      db.exec(fmt::format("CREATE TEMP VIEW {0} AS SELECT * FROM srv.{0}", t));
    }
  }
  // Pass 2: the same windows, with the server's host, processes and ASH and
  // the client's driver CPU per window.
  ExplainOptions o = options;
  std::vector<std::int64_t> driver;
  for (const auto& w : client_side.windows) {
    driver.push_back(w.accounting ? w.accounting->driver_cpu_ns : 0);
  }
  o.client_driver_cpu_ns = std::move(driver);
  Report r = explain(client, o);
  r.hosts.push_back(summarise(client_side, "client"));
  auto s = summarise(r, "server");
  s.host = server_host;
  s.cores = static_cast<int>(db.execAndGet("SELECT cores FROM srv.run").getInt64());
  r.hosts.push_back(std::move(s));
  r.notes.insert(
      r.notes.begin(),
      fmt::format("Client + server: driver CPU from {} (host {}), host, process and ASH figures "
                  "from {} (host {}). The files hold no clock-offset estimate: both hosts are "
                  "assumed to share one clock.",
                  client.path(), client_side.run.host, server_path, server_host));
  if (server.from_ns > queries.from_ns || server.to_ns < queries.to_ns) {
    r.notes.push_back(
        fmt::format("The server file covers only part of the queries ({} .. {} s of {} .. {} s).",
                    time_text(server.from_ns), time_text(server.to_ns), time_text(queries.from_ns),
                    time_text(queries.to_ns)));
  }
  return r;
}

}  // namespace stallscope::correlate
