// PgStatsPoller: PostgreSQL's cumulative statistics, replication state,
// settings and pg_stat_statements, read on the ASH sampler's connection
// (sampler/pg_stats.h says what and how often).
#include <libpq-fe.h>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/pg.h"
#include "common/sql_secrets.h"
#include "sampler/pg_stats.h"

namespace stallscope::sampler::detail {
namespace {

// The result of `sql`, or null when it failed (the caller leaves its rows
// out).
pg::Result query(pg_conn* conn, const std::string& sql) {
  pg::Result res(PQexecParams(conn, sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0));
  if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) return nullptr;
  return res;
}

// pg_stat_database of the connection's database, pg_stat_wal (14+), and the
// checkpoint counters (pg_stat_bgwriter; 17+: pg_stat_checkpointer).
std::string counters_sql(int version) {
  const bool wal = version >= 140000;
  const bool checkpointer = version >= 170000;
  return fmt::format(
      "SELECT d.xact_commit, d.xact_rollback, d.temp_files, d.temp_bytes, {}, {} "
      "FROM pg_stat_database d{}{} WHERE d.datname = current_database()",
      wal ? "w.wal_records, w.wal_fpi, w.wal_bytes::bigint"
          : "NULL::bigint, NULL::bigint, NULL::bigint",
      checkpointer ? "c.num_timed, c.num_requested" : "c.checkpoints_timed, c.checkpoints_req",
      wal ? " CROSS JOIN pg_stat_wal w" : "",
      checkpointer ? " CROSS JOIN pg_stat_checkpointer c" : " CROSS JOIN pg_stat_bgwriter c");
}

// Lags as ns; WAL not yet confirmed flushed (on a primary); since the last
// reply (12+).
std::string replication_sql(int version) {
  return fmt::format(
      "SELECT pid, application_name, host(client_addr), state, sync_state, sync_priority, "
      "(extract(epoch FROM write_lag) * 1e9)::bigint, "
      "(extract(epoch FROM flush_lag) * 1e9)::bigint, "
      "(extract(epoch FROM replay_lag) * 1e9)::bigint, "
      "CASE WHEN pg_is_in_recovery() THEN NULL "
      "ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)::bigint END, {} "
      "FROM pg_stat_replication",
      version >= 120000 ? "(extract(epoch FROM clock_timestamp() - reply_time) * 1e9)::bigint"
                        : "NULL::bigint");
}

std::optional<std::int64_t> col(const pg::Result& res, int row, int c) {
  return pg::int64_or_null(res.get(), row, c);
}

}  // namespace

void PgStatsPoller::first(pg_conn* conn, std::int64_t mono_ns, std::int64_t wall_ns,
                          schema::Batch& batch) {
  if (started_ || !conn) return;
  started_ = true;
  const int version = PQserverVersion(conn);
  counters_sql_ = counters_sql(version);
  replication_sql_ = replication_sql(version);
  read_settings(conn, wall_ns, batch);
  find_statements(conn);
  poll(conn, wall_ns, true, true, batch);
  next_ns_ = mono_ns + kPgStatsPeriodNs;
  next_statements_ns_ = mono_ns + kPgStatementsPeriodNs;
}

void PgStatsPoller::tick(pg_conn* conn, std::int64_t mono_ns, std::int64_t wall_ns,
                         schema::Batch& batch) {
  if (!started_ || !conn || mono_ns < next_ns_) return;
  // On schedule; after a late tick (a failed poll, a slow server) the next
  // poll is a period from now rather than several at once to catch up.
  next_ns_ += kPgStatsPeriodNs;
  if (next_ns_ <= mono_ns) next_ns_ = mono_ns + kPgStatsPeriodNs;
  const bool statements = mono_ns >= next_statements_ns_;
  if (statements) next_statements_ns_ = mono_ns + kPgStatementsPeriodNs;
  poll(conn, wall_ns, statements, false, batch);
}

void PgStatsPoller::last(pg_conn* conn, std::int64_t wall_ns, schema::Batch& batch) {
  if (!started_ || !conn) return;
  poll(conn, wall_ns, true, true, batch);
}

void PgStatsPoller::read_settings(pg_conn* conn, std::int64_t wall_ns, schema::Batch& batch) {
  std::string names;
  for (const char* n : kPgSettingNames) names += fmt::format("{}'{}'", names.empty() ? "" : ",", n);
  auto res = query(
      conn, fmt::format("SELECT name, setting, unit FROM pg_settings WHERE name IN ({})", names));
  if (!res) return;
  for (int r = 0; r < PQntuples(res.get()); ++r) {
    auto name = pg::text_or_null(res.get(), r, 0);
    if (!name) continue;
    batch.pg_stats.settings.push_back({.name = std::move(*name),
                                       .setting = pg::text_or_null(res.get(), r, 1),
                                       .unit = pg::text_or_null(res.get(), r, 2),
                                       .time_ns = wall_ns});
  }
}

void PgStatsPoller::find_statements(pg_conn* conn) {
  // Where the extension lives in this database, and the view's columns
  // (they differ between extension versions).
  auto where = query(conn,
                     "SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON "
                     "n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'");
  if (!where || PQntuples(where.get()) != 1) return;
  const auto schema = pg::text_or_null(where.get(), 0, 0).value_or("public");
  auto cols = query(conn, fmt::format("SELECT attname FROM pg_attribute WHERE attrelid = "
                                      "'{}.pg_stat_statements'::regclass AND attnum > 0 AND NOT "
                                      "attisdropped",
                                      schema));
  if (!cols) return;
  std::set<std::string> have;
  for (int r = 0; r < PQntuples(cols.get()); ++r) {
    if (auto name = pg::text_or_null(cols.get(), r, 0)) have.insert(*name);
  }
  auto count = [&](const char* name) {
    return have.contains(name) ? std::string(name) : std::string("NULL::bigint");
  };
  auto ms_to_ns = [&](const char* name, const char* older = nullptr) {
    if (have.contains(name)) return fmt::format("({} * 1e6)::bigint", name);
    if (older && have.contains(older)) return fmt::format("({} * 1e6)::bigint", older);
    return std::string("NULL::bigint");
  };
  statements_sql_ = fmt::format(
      "SELECT queryid, userid::bigint, dbid::bigint, {}, calls, {}, {}, {}, rows, "
      "temp_blks_written, {}, {}, {}, {}, {}, {}, {}, {{}} "
      "FROM {}.pg_stat_statements({{}}) WHERE queryid IS NOT NULL AND dbid = "
      "(SELECT oid FROM pg_database WHERE datname = current_database())",
      have.contains("toplevel") ? "toplevel" : "true", count("plans"), ms_to_ns("total_plan_time"),
      ms_to_ns("total_exec_time", "total_time"), count("wal_fpi"),
      have.contains("wal_bytes") ? "wal_bytes::bigint" : "NULL::bigint", count("jit_functions"),
      ms_to_ns("jit_generation_time"), ms_to_ns("jit_inlining_time"),
      ms_to_ns("jit_optimization_time"), ms_to_ns("jit_emission_time"), schema);
}

std::optional<std::int64_t> PgStatsPoller::read_statements(pg_conn* conn, std::int64_t time_ns,
                                                           bool texts, schema::Batch& batch) {
  if (statements_sql_.empty()) return std::nullopt;
  auto res = query(conn, fmt::format(fmt::runtime(statements_sql_),
                                     texts ? fmt::format("left(query, {})", kPgStatementTextChars)
                                           : std::string("NULL::text"),
                                     texts ? "true" : "false"));
  if (!res) {
    // Not loaded (shared_preload_libraries), no permission: not asked again.
    statements_sql_.clear();
    return std::nullopt;
  }
  std::int64_t stored = 0;
  for (int r = 0; r < PQntuples(res.get()); ++r) {
    const auto query_id = col(res, r, 0), user_id = col(res, r, 1), db_id = col(res, r, 2),
               calls = col(res, r, 4);
    if (!query_id || !user_id || !db_id || !calls) continue;
    const bool toplevel = pg::text_or_null(res.get(), r, 3).value_or("t") == "t";
    auto [it, is_new] = calls_.try_emplace({*query_id, *user_id, *db_id, toplevel}, *calls);
    if (!is_new) {
      if (it->second == *calls) continue;
      it->second = *calls;
    }
    schema::PgStatementRow row{.time_ns = time_ns,
                               .query_id = *query_id,
                               .user_id = *user_id,
                               .db_id = *db_id,
                               .toplevel = toplevel,
                               .calls = *calls,
                               .plans = col(res, r, 5),
                               .total_plan_time_ns = col(res, r, 6),
                               .total_exec_time_ns = col(res, r, 7),
                               .rows = col(res, r, 8),
                               .temp_blks_written = col(res, r, 9),
                               .wal_fpi = col(res, r, 10),
                               .wal_bytes = col(res, r, 11),
                               .jit_functions = col(res, r, 12),
                               .jit_generation_time_ns = col(res, r, 13),
                               .jit_inlining_time_ns = col(res, r, 14),
                               .jit_optimization_time_ns = col(res, r, 15),
                               .jit_emission_time_ns = col(res, r, 16)};
    if (texts && !texts_.contains(*query_id)) {
      if (auto text = pg::text_or_null(res.get(), r, 17); text && !text->empty()) {
        row.query = mask_sql_secrets(*text);  // utility statements keep their constants
        texts_.insert(*query_id);
      }
    }
    batch.pg_stats.statements.push_back(std::move(row));
    ++stored;
  }
  return stored;
}

void PgStatsPoller::poll(pg_conn* conn, std::int64_t wall_ns, bool statements, bool texts,
                         schema::Batch& batch) {
  const std::int64_t start_mono_ns = mono_now_ns();
  schema::PgStatsSampleRow row{.time_ns = wall_ns};
  if (auto res = query(conn, counters_sql_); res && PQntuples(res.get()) == 1) {
    row.xact_commit = col(res, 0, 0);
    row.xact_rollback = col(res, 0, 1);
    row.temp_files = col(res, 0, 2);
    row.temp_bytes = col(res, 0, 3);
    row.wal_records = col(res, 0, 4);
    row.wal_fpi = col(res, 0, 5);
    row.wal_bytes = col(res, 0, 6);
    row.checkpoints_timed = col(res, 0, 7);
    row.checkpoints_req = col(res, 0, 8);
  }
  if (auto res = query(conn, replication_sql_)) {
    for (int r = 0; r < PQntuples(res.get()); ++r) {
      const auto pid = col(res, r, 0);
      if (!pid) continue;
      batch.pg_stats.replication.push_back({.time_ns = wall_ns,
                                            .pid = static_cast<int>(*pid),
                                            .application_name = pg::text_or_null(res.get(), r, 1),
                                            .client_addr = pg::text_or_null(res.get(), r, 2),
                                            .state = pg::text_or_null(res.get(), r, 3),
                                            .sync_state = pg::text_or_null(res.get(), r, 4),
                                            .sync_priority = col(res, r, 5),
                                            .write_lag_ns = col(res, r, 6),
                                            .flush_lag_ns = col(res, r, 7),
                                            .replay_lag_ns = col(res, r, 8),
                                            .flush_behind_bytes = col(res, r, 9),
                                            .reply_age_ns = col(res, r, 10)});
      ++row.walsenders;
    }
  }
  if (statements) row.statements = read_statements(conn, wall_ns, texts, batch);
  row.duration_ns = mono_now_ns() - start_mono_ns;
  batch.pg_stats.samples.push_back(row);
}

}  // namespace stallscope::sampler::detail
