// explain's results in the run file: the tables finding and stall
// (schema/v1.sql), replaced as a whole on each explain.
//
//   std::vector<schema::FindingRow> findings = ...;  // highest score first
//   std::vector<schema::StallRow> stalls = ...;      // in time order
//   schema::set_busy_timeout(store, 2000);           // wait for a writer's commit
//   schema::replace_findings_and_stalls(store, findings, stalls);
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "schema/store.h"

namespace stallscope::schema {

// One finding row (rank is its position, from 1).
struct FindingRow {
  std::string kind;
  double score = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::string summary;
  std::string evidence_json;  // a JSON object
  std::string suggestion;
  std::optional<std::string> culprit;  // NULL: not named
};

// One stall row (stall_id is its position, from 1); std::optional = NULL.
struct StallRow {
  std::int64_t window_index = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t queries = 0;
  std::optional<double> tps;
  std::optional<double> typical_tps;
  std::optional<double> latency_mean_ms;
  std::optional<double> typical_latency_mean_ms;
  std::optional<double> latency_max_ms;
  std::optional<double> tps_z;
  std::optional<double> latency_z;
  std::string cause;
  std::string explanation;
  std::string evidence_json;           // a JSON object
  std::optional<std::string> culprit;  // NULL: not named
};

// Replaces every row of finding and stall by these, in one transaction.
// Files written before those tables existed get them first, as
// schema/v1.sql defines them. Throws schema::SqliteError (e.g. SQLITE_BUSY
// while a run's writer holds the lock beyond the busy timeout).
void replace_findings_and_stalls(Store& store, std::span<const FindingRow> findings,
                                 std::span<const StallRow> stalls);

// How long a write on the store's connection waits for another connection's
// lock before failing with SQLITE_BUSY.
void set_busy_timeout(Store& store, int timeout_ms);

}  // namespace stallscope::schema
