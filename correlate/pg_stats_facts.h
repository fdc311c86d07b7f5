// Internals of the correlator: what explain reads from the PostgreSQL
// statistics the ASH sampler stores (schema/pg_stats_readers.h) — settings,
// standbys, counters, pg_stat_statements deltas — and the rules that use
// them (correlate/facts_pgstats.cpp): the replication_wait finding, and the
// setting a server_cpu or io_wait finding names as its culprit. A file
// without these tables gives empty facts: no replication_wait beyond the
// ASH share, no setting culprit.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "correlate/correlate.h"
#include "schema/pg_stats_readers.h"

namespace stallscope::correlate::detail {

struct Facts;
struct Span;

// ASH wait events that wait for another server: a synchronous standby's
// confirmation (IPC:SyncRep). They are replication_wait's, not kernel_wait's.
bool is_replication_wait(std::string_view label);

// One standby (a walsender's application_name) over the analysed span.
struct StandbyFacts {
  std::string name;         // application_name ("" when NULL)
  std::string client_addr;  // "local" over a Unix socket
  std::string state;        // the latest seen: streaming, catchup, ...
  std::string sync_state;   // the latest seen: sync, async, potential, quorum
  std::int64_t polls = 0;   // polls it was listed in
  std::optional<std::int64_t> write_lag_max_ns, flush_lag_max_ns, replay_lag_max_ns;
  std::optional<std::int64_t> flush_behind_max_bytes;
  std::optional<std::int64_t> reply_age_max_ns;
};

struct PgStatsFacts {
  std::map<std::string, schema::PgSetting> settings;  // pg_setting; empty without it
  std::optional<schema::PgStatsCounters> counters;    // pg_stats_sample bounding the span
  std::vector<StandbyFacts> standbys;                 // seen in the span, most polls first
  // Names in synchronous_standby_names that no poll of the span listed.
  std::vector<std::string> missing_sync_standbys;
  std::optional<schema::PgStatementDeltas> statements;  // pg_stat_statements over the file
  // The setting value (with its unit), or "" when not stored.
  std::string setting(const std::string& name) const;
};

// The names synchronous_standby_names lists ("FIRST 1 (a, b)", "ANY 2 (a,
// b, c)", "2 (a, b)", "a, b", "*"), unquoted; empty when it is empty.
std::vector<std::string> sync_standby_names(std::string_view value);

// What pg_stats_facts reads: the settings, the counters and the standbys'
// polls over the analysed span, and the pg_stat_statements deltas (the
// schema/pg_stats_readers.h functions of the same names).
struct PgStatsInputs {
  std::map<std::string, schema::PgSetting> settings;
  std::optional<schema::PgStatsCounters> counters;
  std::vector<schema::PgReplicationRow> replication;
  std::optional<schema::PgStatementDeltas> statements;
};
// The server's statistics as the rules read them: each standby's polls
// summed up, most polls first, and the synchronous standbys no poll listed.
PgStatsFacts pg_stats_facts(PgStatsInputs in);

// The replication_wait finding: ASH IPC:SyncRep rows × ASH period ÷ query
// time (record files: their share of sampled non-idle rows), the standby
// named from pg_stat_replication, or named in synchronous_standby_names but
// not connected.
void replication_wait(const Report& r, const Facts& f, std::vector<Finding>& out);

// The standby a replication wait waits for, in one line (a culprit);
// "" when nothing names one.
std::string replication_culprit(const Facts& f);

// What a setting makes the backends spend, for a server_cpu, io_wait or
// lwlock_wait (WAL insertion and WALWrite queues) finding: the culprit line, its evidence and a
// suggestion. nullopt without the statistics (no pg_stats_sample row, no pg_stat_statements
// snapshot); culprit and suggestion empty (the evidence still set) when no setting explains enough
// of it (thresholds in facts_pgstats.cpp, docs/findings.md).
struct SettingCulprit {
  std::string culprit;
  Evidence evidence;
  std::string suggestion;
};
std::optional<SettingCulprit> setting_culprit(const Report& r, const Facts& f, FindingKind kind);

// Adds setting_culprit's evidence to the server_cpu, io_wait and lwlock_wait
// findings in `out`, and its culprit and suggestion when it names one.
void add_setting_culprits(const Report& r, const Facts& f, std::vector<Finding>& out);

// Names the standby in each replication_wait stall (its culprit).
void name_replication_stalls(const Facts& f, std::vector<Stall>& stalls);

}  // namespace stallscope::correlate::detail
