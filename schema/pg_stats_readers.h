// Typed reads of the PostgreSQL statistics the ASH sampler stores
// (sampler/pg_stats_sampler.cpp; tables pg_setting, pg_stats_sample,
// pg_replication_sample, pg_statement_sample, pg_statement_text), for
// explain's replication and setting facts (correlate/facts_pgstats.cpp).
// A file made before these tables existed reads as one without them: empty
// results, never an error.
//
//   auto settings = schema::pg_settings(store);           // name → value
//   auto counters = schema::pg_stats_counters(store, span_start_ns, span_end_ns);
//   auto standbys = schema::pg_replication_rows(store, span_start_ns, span_end_ns);
//   auto statements = schema::pg_statement_deltas(store);
//
// Times are wall clock, ns since the epoch. Errors (a failed step) throw
// schema::SqliteError (store.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "schema/records.h"
#include "schema/store.h"

namespace stallscope::schema {

// One pg_setting row's value.
struct PgSetting {
  std::string setting;  // "" for NULL
  std::string unit;     // "" for none
};
// Every pg_setting row by name; empty without the table.
std::map<std::string, PgSetting> pg_settings(Store& store);

// The pg_stats_sample rows that bound [start_ns, end_ns]: `first` is the
// latest at or before start_ns (else the earliest after it), `last` the
// earliest at or after end_ns (else the latest before it), so their
// difference covers the span; `polls` counts the rows in [start_ns, end_ns]
// and `polls_without_walsender` those of them with no pg_replication_sample
// row. Absent without rows.
struct PgStatsCounters {
  PgStatsSampleRow first;
  PgStatsSampleRow last;
  std::int64_t polls = 0;
  std::int64_t polls_without_walsender = 0;
};
std::optional<PgStatsCounters> pg_stats_counters(Store& store, std::int64_t start_ns,
                                                 std::int64_t end_ns);

// The pg_replication_sample rows with time_ns in [start_ns, end_ns], in time
// order; empty without the table.
std::vector<PgReplicationRow> pg_replication_rows(Store& store, std::int64_t start_ns,
                                                  std::int64_t end_ns);

// One pg_stat_statements entry's counters over the file: its last stored
// row minus its row in the first snapshot (or minus 0 when the entry first
// appeared later), entries of the same queryid (users, nesting levels) added
// together. Times in ns; a column the server's pg_stat_statements lacks
// stays 0.
struct PgStatementDelta {
  std::int64_t query_id = 0;
  std::int64_t calls = 0;
  std::int64_t plans = 0;
  std::int64_t plan_ns = 0;
  std::int64_t exec_ns = 0;
  std::int64_t rows = 0;
  std::int64_t temp_blks_written = 0;
  std::int64_t wal_fpi = 0;
  std::int64_t wal_bytes = 0;
  std::int64_t jit_functions = 0;
  std::int64_t jit_generation_ns = 0;
  std::int64_t jit_inlining_ns = 0;
  std::int64_t jit_optimization_ns = 0;
  std::int64_t jit_emission_ns = 0;
  std::int64_t jit_ns() const {
    return jit_generation_ns + jit_inlining_ns + jit_optimization_ns + jit_emission_ns;
  }
  std::string query;  // pg_statement_text, "" when not stored
};
struct PgStatementDeltas {
  std::int64_t snapshots = 0;  // distinct snapshot times
  std::int64_t first_ns = 0;   // first and last snapshot
  std::int64_t last_ns = 0;
  bool has_jit = false;                   // the jit columns were read (pg_stat_statements 1.10+)
  bool has_planning = false;              // total_plan_time was read (1.8+)
  std::vector<PgStatementDelta> entries;  // calls > 0 only, most exec + plan time first
};
// Absent when the file holds no pg_stat_statements snapshot, or just one.
std::optional<PgStatementDeltas> pg_statement_deltas(Store& store);

}  // namespace stallscope::schema
