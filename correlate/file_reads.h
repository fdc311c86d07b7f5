// explain's read layer: each pass's rows and lookups (row_source.h) bound to
// the run file through schema/ readers. With explain.cpp, which calls these
// and the few one-shot schema/ reads between its passes, the only file of
// the correlator's passes that holds the Store. A reader a binding opens
// lives as long as the struct it returns (held by shared_ptr). What reading
// throws is schema::SqliteError (explain.cpp turns it into read_error).
#pragma once

#include "correlate/kernel_sleep.h"
#include "correlate/lock_chains.h"
#include "correlate/passes.h"
#include "correlate/sessions.h"
#include "schema/store.h"

namespace stallscope::correlate::detail {

// The run row; Error(usage) when the file holds none.
RunRow read_run_row(schema::Store& store);
// The query scan's rows up to its cut (query_scan_cut_ns for `run`).
QueryReads query_reads(schema::Store& store, const RunSummary& run);
RunFactsInputs run_facts_inputs(schema::Store& store);
ProcessLookups process_lookups(schema::Store& store);
// The cgroups' cpu.stat over `span`.
CgroupInputs cgroup_inputs(schema::Store& store, Span span);
ProcessReads process_reads(schema::Store& store);
ConnectionErrorLookups connection_error_lookups(schema::Store& store);
// The latest ASH row of a pid at or before a time.
Lookup<std::optional<schema::LatestActivity>, int, std::int64_t> latest_activity(
    schema::Store& store);
LockChainLookups lock_chain_lookups(schema::Store& store);
SessionReads session_reads(schema::Store& store);

}  // namespace stallscope::correlate::detail
