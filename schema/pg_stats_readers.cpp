// The reads behind explain's replication and setting facts.
#include "schema/pg_stats_readers.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "schema/row.h"

namespace stallscope::schema {
namespace {

constexpr const char* kStatsColumns =
    "time_ns, duration_ns, xact_commit, xact_rollback, temp_files, temp_bytes, wal_records, "
    "wal_fpi, wal_bytes, checkpoints_timed, checkpoints_req, walsenders, statements";

PgStatsSampleRow stats_row(const Cursor& c) {
  PgStatsSampleRow r;
  r.time_ns = c.int64(0);
  r.duration_ns = c.int64(1);
  r.xact_commit = c.opt_int64(2);
  r.xact_rollback = c.opt_int64(3);
  r.temp_files = c.opt_int64(4);
  r.temp_bytes = c.opt_int64(5);
  r.wal_records = c.opt_int64(6);
  r.wal_fpi = c.opt_int64(7);
  r.wal_bytes = c.opt_int64(8);
  r.checkpoints_timed = c.opt_int64(9);
  r.checkpoints_req = c.opt_int64(10);
  r.walsenders = c.int64(11);
  r.statements = c.opt_int64(12);
  return r;
}

// The one row `sql` (with ?1 bound to at_ns) selects, if any.
std::optional<PgStatsSampleRow> one_stats_row(Store& store, const std::string& sql,
                                              std::int64_t at_ns) {
  Cursor c(store.db(), sql.c_str());
  c.bind(1, at_ns);
  if (!c.step()) return std::nullopt;
  return stats_row(c);
}

}  // namespace

std::map<std::string, PgSetting> pg_settings(Store& store) {
  std::map<std::string, PgSetting> out;
  if (!detail::table_exists(store, "pg_setting")) return out;
  Cursor c(store.db(), "SELECT name, setting, unit FROM pg_setting");
  while (c.step()) out[std::string(c.text(0))] = {std::string(c.text(1)), std::string(c.text(2))};
  return out;
}

std::optional<PgStatsCounters> pg_stats_counters(Store& store, std::int64_t start_ns,
                                                 std::int64_t end_ns) {
  if (!detail::table_exists(store, "pg_stats_sample")) return std::nullopt;
  const std::string cols = kStatsColumns;
  auto first = one_stats_row(
      store,
      "SELECT " + cols + " FROM pg_stats_sample WHERE time_ns <= ?1 ORDER BY time_ns DESC LIMIT 1",
      start_ns);
  if (!first) {
    first = one_stats_row(
        store,
        "SELECT " + cols + " FROM pg_stats_sample WHERE time_ns >= ?1 ORDER BY time_ns LIMIT 1", 0);
  }
  if (!first) return std::nullopt;
  auto last = one_stats_row(
      store,
      "SELECT " + cols + " FROM pg_stats_sample WHERE time_ns >= ?1 ORDER BY time_ns LIMIT 1",
      end_ns);
  if (!last) {
    last =
        one_stats_row(store,
                      "SELECT " + cols +
                          " FROM pg_stats_sample WHERE time_ns >= ?1 ORDER BY time_ns DESC LIMIT 1",
                      0);
  }
  PgStatsCounters out{*first, *last, 0, 0};
  Cursor c(store.db(),
           "SELECT count(*), sum(walsenders = 0) FROM pg_stats_sample "
           "WHERE time_ns >= ?1 AND time_ns <= ?2");
  c.bind(1, start_ns);
  c.bind(2, end_ns);
  c.step();
  out.polls = c.int64(0);
  out.polls_without_walsender = c.int64(1);
  return out;
}

std::vector<PgReplicationRow> pg_replication_rows(Store& store, std::int64_t start_ns,
                                                  std::int64_t end_ns) {
  std::vector<PgReplicationRow> out;
  if (!detail::table_exists(store, "pg_replication_sample")) return out;
  Cursor c(store.db(),
           "SELECT time_ns, pid, application_name, client_addr, state, sync_state, "
           "sync_priority, write_lag_ns, flush_lag_ns, replay_lag_ns, flush_behind_bytes, "
           "reply_age_ns FROM pg_replication_sample WHERE time_ns >= ?1 AND time_ns <= ?2 "
           "ORDER BY time_ns, pid");
  c.bind(1, start_ns);
  c.bind(2, end_ns);
  while (c.step()) {
    PgReplicationRow r;
    r.time_ns = c.int64(0);
    r.pid = static_cast<int>(c.int64(1));
    r.application_name = c.opt_text(2);
    r.client_addr = c.opt_text(3);
    r.state = c.opt_text(4);
    r.sync_state = c.opt_text(5);
    r.sync_priority = c.opt_int64(6);
    r.write_lag_ns = c.opt_int64(7);
    r.flush_lag_ns = c.opt_int64(8);
    r.replay_lag_ns = c.opt_int64(9);
    r.flush_behind_bytes = c.opt_int64(10);
    r.reply_age_ns = c.opt_int64(11);
    out.push_back(std::move(r));
  }
  return out;
}

std::optional<PgStatementDeltas> pg_statement_deltas(Store& store) {
  if (!detail::table_exists(store, "pg_statement_sample")) return std::nullopt;
  PgStatementDeltas out;
  {
    Cursor c(store.db(),
             "SELECT count(DISTINCT time_ns), min(time_ns), max(time_ns), "
             "count(jit_generation_time_ns), count(total_plan_time_ns) FROM pg_statement_sample");
    c.step();
    out.snapshots = c.int64(0);
    out.first_ns = c.int64(1);
    out.last_ns = c.int64(2);
    out.has_jit = c.int64(3) > 0;
    out.has_planning = c.int64(4) > 0;
  }
  if (out.snapshots < 2) return std::nullopt;
  // Per entry (key), rows in time order: the first snapshot's row is the
  // baseline, the last row the end.
  Cursor c(store.db(),
           "SELECT s.query_id, s.time_ns, s.calls, s.plans, s.total_plan_time_ns, "
           "s.total_exec_time_ns, s.rows, s.temp_blks_written, s.wal_fpi, s.wal_bytes, "
           "s.jit_functions, s.jit_generation_time_ns, s.jit_inlining_time_ns, "
           "s.jit_optimization_time_ns, s.jit_emission_time_ns, s.user_id, s.db_id, s.toplevel "
           "FROM pg_statement_sample s ORDER BY s.query_id, s.user_id, s.db_id, s.toplevel, "
           "s.time_ns");
  constexpr int kCounters = 13;  // columns 2 .. 14
  std::map<std::int64_t, PgStatementDelta> by_query;
  std::array<std::int64_t, kCounters> base{}, last{};
  std::optional<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>> key;
  auto flush = [&] {
    if (!key) return;
    auto& d = by_query[std::get<0>(*key)];
    d.query_id = std::get<0>(*key);
    std::int64_t* fields[kCounters] = {&d.calls,
                                       &d.plans,
                                       &d.plan_ns,
                                       &d.exec_ns,
                                       &d.rows,
                                       &d.temp_blks_written,
                                       &d.wal_fpi,
                                       &d.wal_bytes,
                                       &d.jit_functions,
                                       &d.jit_generation_ns,
                                       &d.jit_inlining_ns,
                                       &d.jit_optimization_ns,
                                       &d.jit_emission_ns};
    // A counter that went backwards (a reset) counts from 0.
    for (int i = 0; i < kCounters; ++i) {
      const auto delta = last[static_cast<std::size_t>(i)] - base[static_cast<std::size_t>(i)];
      *fields[i] += delta >= 0 ? delta : last[static_cast<std::size_t>(i)];
    }
  };
  while (c.step()) {
    const auto k = std::make_tuple(c.int64(0), c.int64(15), c.int64(16), c.int64(17));
    const bool is_new = !key || *key != k;
    if (is_new) {
      flush();
      key = k;
      base.fill(0);
      if (c.int64(1) == out.first_ns) {
        for (int i = 0; i < kCounters; ++i) base[static_cast<std::size_t>(i)] = c.int64(2 + i);
      }
    }
    for (int i = 0; i < kCounters; ++i) last[static_cast<std::size_t>(i)] = c.int64(2 + i);
  }
  flush();
  for (auto& [id, d] : by_query) {
    if (d.calls > 0) out.entries.push_back(std::move(d));
  }
  if (detail::table_exists(store, "pg_statement_text")) {
    Cursor t(store.db(), "SELECT query FROM pg_statement_text WHERE query_id = ?1");
    for (auto& d : out.entries) {
      t.reset();
      t.bind(1, d.query_id);
      if (t.step()) d.query = std::string(t.text(0));
    }
  }
  std::stable_sort(out.entries.begin(), out.entries.end(), [](const auto& x, const auto& y) {
    return x.exec_ns + x.plan_ns > y.exec_ns + y.plan_ns;
  });
  return out;
}

}  // namespace stallscope::schema
