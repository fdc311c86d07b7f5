// explain's reads for lock chains: the ASH polls that saw a backend waiting
// on a heavyweight lock (wait_event_type 'Lock'), each with every session
// row of that poll (pg_activity_sample; the ASH sampler also stores a row
// for a blocker that is plain idle) and the waiters' ungranted pg_locks rows
// (pg_lock_wait). Files made before pg_lock_wait existed read as polls
// without lock rows.
//
//   for (const auto& poll : schema::read_lock_polls(store, from_ns, to_ns)) {
//     for (const auto& row : poll.sessions) ... row.blocking_pids ...
//     for (const auto& lock : poll.waits) ... lock.locktype ...
//   }
//
// Errors: SqliteError (row.h) on a failed read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schema/store.h"

namespace stallscope::schema {

// One pg_activity_sample row of a lock poll. Texts are "" when NULL.
struct LockPollSession {
  int pid = 0;
  std::string backend_type;
  std::string state;  // active, idle, idle in transaction, ...
  std::string wait_event_type;
  std::string wait_event;
  std::string application_name;
  std::string query;  // pg_query_text.query: the current query, or the last one when idle
  std::optional<std::int64_t> xact_start_ns, query_start_ns, state_change_ns;  // wall clock
  std::vector<int> blocking_pids;  // pg_blocking_pids(pid) as stored, in order; empty when none
};

// One pg_lock_wait row: the lock a waiter asked for and was not granted.
struct LockPollWait {
  int pid = 0;
  std::string locktype;  // relation, tuple, transactionid, virtualxid, advisory, object, ...
  std::string mode;      // e.g. ShareLock ("" when NULL)
  std::optional<std::int64_t> database_oid, relation_oid;
  std::string relation_name;  // "" when NULL
  std::optional<std::int64_t> page, tuple;
  std::string virtualxid;
  std::optional<std::int64_t> transactionid, classid, objid, objsubid;
  std::string
      write_relation_name;  // transactionid waits: the table the waiter writes ("" when none)
};

// An ASH poll with at least one Lock waiter.
struct LockPoll {
  std::int64_t ash_tick = 0;
  std::int64_t time_ns = 0;               // wall clock of the poll
  std::vector<LockPollSession> sessions;  // every row of the poll, by pid
  std::vector<LockPollWait> waits;        // by pid
};

// The polls in [from_ns, to_ns) with a pg_activity_sample row in
// wait_event_type 'Lock', in poll order.
std::vector<LockPoll> read_lock_polls(Store& store, std::int64_t from_ns, std::int64_t to_ns);

// Parses a stored blocking_pids text ("123,456"); entries that are not
// integers are skipped.
std::vector<int> parse_blocking_pids(std::string_view text);

}  // namespace stallscope::schema
