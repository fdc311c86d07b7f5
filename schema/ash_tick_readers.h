// The ASH polls (ash_tick) in time order, for explain's blind-poll check
// (correlate/ash_coverage.cpp): a poll that came late or not at all left the
// server's waits unsampled for that time.
//
//   schema::AshPolls polls(store, from_ns, to_ns);
//   for (schema::AshPoll p; polls.next(p);) use(p.time_ns, p.duration_ns);
//
// Reads through store.db() (explain_pair's shifted views included); throws
// schema::SqliteError on errors.
#pragma once

#include <cstdint>

#include "schema/row.h"
#include "schema/store.h"

namespace stallscope::schema {

// One ash_tick row: a poll that returned (failed polls have no row).
struct AshPoll {
  std::int64_t time_ns = 0;      // wall clock when the poll was sent
  std::int64_t duration_ns = 0;  // its round trip (the query ran at some point within it)
};

// The polls sent in [from_ns, to_ns], by time.
class AshPolls {
 public:
  AshPolls(Store& store, std::int64_t from_ns, std::int64_t to_ns);
  bool next(AshPoll& poll);

 private:
  Cursor st_;
};

}  // namespace stallscope::schema
