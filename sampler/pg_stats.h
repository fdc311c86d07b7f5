// Private to sampler/: the PostgreSQL statistics the ASH sampler reads on
// its own thread and connection besides pg_stat_activity
// (sampler/pg_stats_sampler.cpp). Cheap by construction: the counters
// (pg_stat_database of the connection's database, pg_stat_wal,
// pg_stat_bgwriter) and pg_stat_replication once per period (1 s), the
// settings explain names once per run, pg_stat_statements — when the
// extension is installed in the database and loaded; never required — at
// the first poll, every kPgStatementsPeriodNs and at the end, storing only
// the entries whose calls changed.
//
//   detail::PgStatsPoller stats;
//   stats.first(conn, mono_ns, wall_ns, batch);  // at start: settings, counters, statements
//   stats.tick(conn, mono_ns, wall_ns, batch);   // after each ASH poll: polls when due
//   stats.last(conn, wall_ns, batch);            // at stop: counters and statements
//
// No call throws: a query that fails (a view this server lacks, no
// permission, a lost connection) leaves its rows out; pg_stat_statements is
// not asked again in this run after it failed once.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "common/units.h"
#include "schema/records.h"

struct pg_conn;

namespace stallscope::sampler::detail {

inline constexpr std::int64_t kPgStatsPeriodNs = common::kNsPerS;
inline constexpr std::int64_t kPgStatementsPeriodNs = 10 * common::kNsPerS;
// Characters of a pg_stat_statements query text stored.
inline constexpr int kPgStatementTextChars = 1000;
// The settings read once per run (pg_setting rows).
inline constexpr const char* kPgSettingNames[] = {"synchronous_standby_names",
                                                  "synchronous_commit",
                                                  "work_mem",
                                                  "jit",
                                                  "jit_above_cost",
                                                  "jit_inline_above_cost",
                                                  "jit_optimize_above_cost",
                                                  "full_page_writes",
                                                  "checkpoint_timeout",
                                                  "max_wal_size",
                                                  "wal_compression",
                                                  "plan_cache_mode",
                                                  "shared_preload_libraries",
                                                  "max_parallel_workers_per_gather"};

class PgStatsPoller {
 public:
  // At the first connection: the settings, where pg_stat_statements lives,
  // then a full poll with every pg_stat_statements entry.
  void first(pg_conn* conn, std::int64_t mono_ns, std::int64_t wall_ns, schema::Batch& batch);
  // After an ASH poll: a poll when one is due (kPgStatsPeriodNs since the
  // last), with pg_stat_statements when that is due too.
  void tick(pg_conn* conn, std::int64_t mono_ns, std::int64_t wall_ns, schema::Batch& batch);
  // At stop: a last poll with pg_stat_statements (and their texts).
  void last(pg_conn* conn, std::int64_t wall_ns, schema::Batch& batch);

 private:
  void poll(pg_conn* conn, std::int64_t wall_ns, bool statements, bool texts, schema::Batch& batch);
  void read_settings(pg_conn* conn, std::int64_t wall_ns, schema::Batch& batch);
  void find_statements(pg_conn* conn);
  // Rows stored, or nullopt when the read failed.
  std::optional<std::int64_t> read_statements(pg_conn* conn, std::int64_t time_ns, bool texts,
                                              schema::Batch& batch);

  bool started_ = false;
  std::int64_t next_ns_ = 0;             // monotonic: the next poll
  std::int64_t next_statements_ns_ = 0;  // ... with pg_stat_statements
  std::string counters_sql_;
  std::string replication_sql_;
  std::string statements_sql_;  // "" without pg_stat_statements; {} = showtext
  // Calls per entry (queryid, userid, dbid, toplevel) at its last stored row.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, bool>, std::int64_t> calls_;
  std::set<std::int64_t> texts_;  // queryids whose text was stored
};

}  // namespace stallscope::sampler::detail
