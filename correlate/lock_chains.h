// Blocking chains to the root (lock_chains.cpp): per ASH poll, every Lock
// waiter's chain of pg_blocking_pids walked to its roots (sessions that
// block and are not themselves waiting on a heavyweight lock), summed over a
// span into the dominant root, the lock type of each link, and — when the
// root changes from poll to poll — the lock itself (a turnstile). Named in
// the lock_wait finding's and the lock_wait stalls' culprit.
//
//   auto polls = schema::read_lock_polls(store, from_ns, to_ns);
//   auto chains = detail::summarize_lock_chains(polls, [&](int pid) { return mine(pid); });
//   finding.culprit = chains.culprit;  // "" when no waiter was seen
//
// pg_blocking_pids lists hard blockers (holders of a conflicting lock) and
// soft ones (requests queued ahead that conflict): a query behind an ALTER
// TABLE that waits for a long transaction has the chain query → ALTER →
// transaction, and both are named.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "correlate/correlate.h"
#include "correlate/row_source.h"
#include "schema/lock_readers.h"
#include "schema/run_reader.h"

namespace stallscope::correlate::detail {

// A session on a chain as one poll saw it.
struct ChainSession {
  int pid = 0;           // 0: pg_blocking_pids' 0, a prepared transaction
  bool sampled = false;  // the poll had a row for it (else the fields below are empty)
  std::string state;     // active, idle, idle in transaction, ...
  std::string backend_type;
  std::string application_name;
  std::string query;  // current, or last when idle
  std::string wait_event_type, wait_event;
  std::optional<std::int64_t> xact_age_ns;  // poll time − xact_start
};

// One waiter on a chain and the lock it waits for.
struct ChainLink {
  ChainSession waiter;
  std::string locktype;  // pg_locks.locktype, else the Lock wait event (its name)
  std::string mode;      // "" without a pg_lock_wait row
  std::string target;    // the lock named: "relation acct", "advisory lock (0, 21)", …
};

// What the chains of a span add up to.
struct LockChainSummary {
  std::int64_t polls = 0;        // polls with at least one counted waiter
  std::int64_t waiter_rows = 0;  // counted waiter rows (waiter × poll)
  std::int64_t cycle_rows = 0;   // waiter rows whose chain reached no root (a cycle)
  int max_poll_waiters = 0;      // most counted waiters in one poll
  std::int64_t distinct_roots = 0;
  // The root blocking the most waiter rows; absent when no chain had a root.
  std::optional<ChainSession> root;   // as its last poll as the main root saw it
  std::int64_t root_waiter_rows = 0;  // waiter rows whose chain reached it
  std::int64_t root_polls = 0;        // polls in which it was a root
  int root_max_waiters = 0;           // most waiters behind it in one poll
  std::int64_t root_idle_polls = 0;   // of root_polls: it was idle / idle in transaction
  std::vector<ChainLink> chain;  // waiter → … → root: the longest chain to it in that poll
  std::map<std::string, std::int64_t> link_locktypes;  // locktype → links on chains to it
  // A turnstile: the roots change from poll to poll (≥ kTurnstileMinRoots
  // roots, none blocking kTurnstileMaxRootShare of the waiter rows or more).
  bool turnstile = false;
  std::string hot_lock;  // the lock most waited for (by target), for a turnstile
  std::string hot_locktype;
  std::int64_t hot_lock_rows = 0;
  std::string waiting_query;  // the most frequent query of the counted waiters
  // Set by name_lock_roots: the span's queries per second, for a turnstile's
  // hold time (≈ 1 / tps when every transaction takes the lock).
  std::optional<double> tps;
  std::string culprit;  // one line; "" when no waiter was counted
};

inline constexpr std::int64_t kTurnstileMinRoots = 3;
inline constexpr double kTurnstileMaxRootShare = 0.5;

// Walks every chain of every poll. `counted(pid)` chooses the waiters whose
// chains are counted (this run's backends); null: every client backend.
// Chains may pass through any session. A cycle ends the walk.
LockChainSummary summarize_lock_chains(const std::vector<schema::LockPoll>& polls,
                                       const std::function<bool(int)>& counted);

// The lock a waiter asked for, named: "advisory lock (0, 21)", "the NOTIFY
// queue lock (object 0 of pg_database)", "row (0,1) of relation hot", ….
std::string lock_target_text(const schema::LockPollWait& w);

// What name_lock_roots looks up: the lock polls of a time range
// (schema::read_lock_polls), and a pid's latest ASH row at or before a time
// (schema::ActivityLookup::latest) for a root the polls did not sample.
struct LockChainLookups {
  Lookup<std::vector<schema::LockPoll>, std::int64_t, std::int64_t> polls_between;
  Lookup<std::optional<schema::LatestActivity>, int, std::int64_t> latest_activity;
};
// Sets the culprit of the lock_wait finding and of each lock_wait stall from
// the chains of their spans, and gives each such stall's explanation its
// root (replacing "blocked mostly by pid N", which may name a waiter).
void name_lock_roots(const LockChainLookups& lookups, Report& report,
                     const std::function<bool(int)>& counted);

}  // namespace stallscope::correlate::detail
