// Typed reads of the run file behind explain's path and pooler facts
// (correlate/facts_path.cpp, correlate/facts_pooler.cpp): the SQL lives
// here, callers get values. The run row's readers are in run_reader.h. Small
// results are value types; tables that grow with the run (thread_sample,
// pooler_sample) are read through a scan, one row at a time.
//
//   auto memory = schema::host_memory_totals(store, from_ns, to_ns);
//   schema::PoolerSampleScan scan(store, after_ns, before_ns);
//   for (schema::PoolerSample row; scan.next(row);) use(row.wait_ns);
//
// Times are wall clock, ns since the epoch. Errors (a failed step) throw
// schema::SqliteError (store.h), like schema::Cursor.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "schema/row.h"
#include "schema/store.h"

namespace stallscope::schema {

// ---- sample, host_memory_sample ----

// First and last sample_id of the ticks with time_ns in (after_ns, until_ns];
// nullopt when there is none.
struct SampleIdRange {
  std::int64_t first = 0;
  std::int64_t last = 0;
};
std::optional<SampleIdRange> sample_ids_in(Store& store, std::int64_t after_ns,
                                           std::int64_t until_ns);

// Sums of the host_memory_sample rows whose tick has time_ns in
// (after_ns, until_ns]; NULL sums (no rows, or no PSI) read as 0, not
// nullopt: the memory_pressure rule reads a missing sum as no pressure, and
// `rows` (and psi_span_ns for PSI) tells an empty span apart.
struct HostMemoryTotals {
  std::int64_t rows = 0;
  std::int64_t psi_span_ns = 0;  // Σ sample.interval_ns of the rows with PSI memory
  std::int64_t psi_some_us = 0;
  std::int64_t psi_full_us = 0;
  std::int64_t major_faults = 0;
  std::int64_t swap_in_pages = 0;
  std::int64_t swap_out_pages = 0;
};
HostMemoryTotals host_memory_totals(Store& store, std::int64_t after_ns, std::int64_t until_ns);

// ---- thread_sample: the driver's own threads ----

// The state and wchan of every thread_sample row of `process_id` whose
// thread is one of the driver's (comm ss-driver/N), sample_id in
// [first_sample_id, last_sample_id].
struct ThreadState {
  std::string state;                 // "" for NULL
  std::optional<std::string> wchan;  // NULL: nullopt
};
class DriverThreadStateScan {
 public:
  DriverThreadStateScan(Store& store, std::int64_t process_id, std::int64_t first_sample_id,
                        std::int64_t last_sample_id);
  // The next row into `row`; false when done.
  bool next(ThreadState& row);

 private:
  Cursor cursor_;
};

// ---- client: connections opened in a span ----

// The driver connections with connect_ns in [from_ns, to_ns): how many and
// their summed connect_latency_ns (a NULL latency adds 0 rather than making
// the sum unknown: connection_setup scores the latency it knows).
struct ConnectTotals {
  std::int64_t connections = 0;
  std::int64_t connect_latency_ns = 0;
};
ConnectTotals connects_in(Store& store, std::int64_t from_ns, std::int64_t to_ns);
// Over those connections whose queries name them (query.connection): the
// mean time from connect_ns to the connection's first query's start_ns,
// truncated to ns; nullopt when there is none.
std::optional<std::int64_t> mean_first_query_gap_ns(Store& store, std::int64_t from_ns,
                                                    std::int64_t to_ns);
// The sampled backends of those connections: `process` rows with the
// connection's backend pid started within start_slack_ns of its connect_ns.
struct ConnectionBackend {
  std::int64_t process_id = 0;
  std::int64_t start_ns = 0;  // process.start_ns
  // time_ns of its last process_sample tick; nullopt when it has none.
  std::optional<std::int64_t> last_sample_time_ns;
};
std::vector<ConnectionBackend> connection_backends(Store& store, std::int64_t from_ns,
                                                   std::int64_t to_ns, std::int64_t start_slack_ns);

// ---- pooler_sample ----

// The pooler databases with a row with time_ns in (after_ns, before_ns).
std::set<std::string> pooler_databases(Store& store, std::int64_t after_ns, std::int64_t before_ns);
// One pooler_sample row (schema/v1.sql): deltas since the previous poll and
// SHOW POOLS gauges; std::optional = NULL.
struct PoolerSample {
  std::string database;
  std::int64_t time_ns = 0;
  std::optional<std::int64_t> interval_ns;
  std::optional<std::int64_t> wait_ns;
  std::optional<std::int64_t> xacts;
  std::optional<std::int64_t> cl_waiting;
  std::optional<std::int64_t> sv_active;
  std::optional<std::int64_t> maxwait_ns;
  std::optional<std::int64_t> xact_ns;
};
// The rows with time_ns in (after_ns, before_ns), in time order.
class PoolerSampleScan {
 public:
  PoolerSampleScan(Store& store, std::int64_t after_ns, std::int64_t before_ns);
  // The next row into `row`; false when done.
  bool next(PoolerSample& row);

 private:
  Cursor cursor_;
};

}  // namespace stallscope::schema
