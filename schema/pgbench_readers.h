// Typed reads for explaining an imported pgbench log with a record file
// (correlate::explain_pair): pgbench's processes among the record file's
// sampled processes, its backends by application_name in the record file's
// ASH and by start time among the sampled PostgreSQL processes, and the log
// file names the import was given.
//
//   for (const auto& p : schema::sampled_processes_with_cpu(store, "pgbench", from, to))
//     use(p.process_id, p.pid, p.cpu_ns);
//   for (const auto& b : schema::ash_pids_with_application_name(store, "pgbench", from, to))
//     use(b.pid, b.samples);
//
// Every reader reads through store.db(), so the temporary views that shadow
// the record file's tables (schema/server_file.h) are read in their place.
// Errors throw schema::SqliteError (store.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schema/store.h"

namespace stallscope::schema {

// A process with process rows at ticks in (from_ns, to_ns].
struct SampledProcess {
  std::int64_t process_id = 0;
  int pid = 0;
  std::optional<std::int64_t> start_ns;  // process.start_ns (wall clock)
  std::int64_t rows = 0;                 // its process rows at those ticks
  std::int64_t cpu_ns = 0;  // Σ cpu_ns (schedstat, every thread) of those rows; NULL reads as 0
};
// The processes whose comm is `comm` exactly, with process rows at ticks in
// (from_ns, to_ns], by process_id.
std::vector<SampledProcess> sampled_processes_with_cpu(Store& store, const std::string& comm,
                                                       std::int64_t from_ns, std::int64_t to_ns);

// A backend pid ASH saw (pg_activity_sample) with a given application_name.
struct AshBackend {
  int pid = 0;
  std::int64_t samples = 0;  // its non-idle ASH rows in the span
  // The latest backend_start_ns of those rows (wall clock); absent when NULL.
  std::optional<std::int64_t> backend_start_ns;
};
// The pids of pg_activity_sample rows with application_name = `name` polled
// in [from_ns, to_ns], by pid.
std::vector<AshBackend> ash_pids_with_application_name(Store& store, const std::string& name,
                                                       std::int64_t from_ns, std::int64_t to_ns);

// The pids of pg_activity_sample rows polled in [from_ns, to_ns] whose
// application_name is another one than `name`, ascending. NULL and '' do not
// count: a backend still starting up shows '' before its startup packet's
// application_name is set.
std::vector<int> ash_pids_without_application_name(Store& store, const std::string& name,
                                                   std::int64_t from_ns, std::int64_t to_ns);

// process_identity and postgres_processes_started_between (run_reader.h)
// read the processes.

// The pgbench_aggregate rows (import-pgbench) whose interval starts at
// `interval_start_ns`, by file and line (an index makes this one lookup).
std::vector<PgbenchAggregateRow> pgbench_aggregates_at(Store& store,
                                                       std::int64_t interval_start_ns);

// run.command_line of the store's own run row (`main.run`, never an
// attached file's); nullopt without a run row.
std::optional<std::string> run_command_line(Store& store);

}  // namespace stallscope::schema
