// explain on a `record --pg` file (no queries): the client sessions and
// their client processes (internal to the correlator). explain() calls, in
// order:
//
//   auto s = session_view(session_reads(store), {run, span, f.ash_period_ns});  // before the
//   passes if (s) add_session_backends(*s, qp);      // backends on the path, ASH by their pids
//   ... the passes ...
//   if (s) remove_client_processes(*s, f);   // the clients are not "others"
//   report.accounting = session_accounting(*s, sums.total, f);
//   report.sessions = s->view;
//   ... find() calls client_process_findings() ...
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "correlate/correlate.h"
#include "correlate/passes.h"
#include "correlate/row_source.h"
#include "schema/session_readers.h"

namespace stallscope::correlate::detail {

struct SessionScan {
  SessionView view;
  // The client sessions' backends: process ids (matched by pid and start
  // time) and pids.
  std::unordered_set<std::int64_t> backend_process_ids;
  std::unordered_set<int> backend_pids;
  std::unordered_set<std::int64_t> client_process_ids;
  // Whole-view figures, ns (polls × ASH period).
  std::int64_t on_cpu_ns = 0;
  std::map<std::string, std::int64_t> wait_by_class_ns;
  std::int64_t idle_ns = 0;  // idle + idle in transaction + Client waits + other
};

// What the session view reads: schema/session_readers.h's functions of the
// same names (process_identities: schema::read_process_identities,
// sessions: read_sessions, record_clients: read_record_clients), bound by
// file_reads.cpp. Nothing past has_sessions is read without sessions.
struct SessionReads {
  Lookup<bool> has_sessions;
  Lookup<std::optional<schema::AshTickSpan>, std::int64_t, std::int64_t> ash_tick_span;
  Lookup<std::vector<schema::SessionInfo>> sessions;
  Lookup<std::vector<schema::SessionBusyPolls>, std::int64_t, std::int64_t> session_busy_polls;
  Lookup<std::vector<schema::SessionIdlePolls>, const schema::AshTickSpan&> session_idle_polls;
  Lookup<std::vector<schema::ProcessIdentity>> process_identities;
  Lookup<std::vector<schema::RecordClient>> record_clients;
  // process_id, (from, to] ns.
  Lookup<schema::ProcessCpu, std::int64_t, std::int64_t, std::int64_t> process_cpu;
  Lookup<std::vector<schema::ProcessSleep>, std::int64_t, std::int64_t, std::int64_t>
      process_sleeps;
};

struct SessionInputs {
  const RunRow& run;
  Span span;
  std::int64_t ash_period_ns = 0;
};

// The session view of a file without queries; nullopt when it has no
// pg_session rows (no --pg, or a file of schema version 2) or no client
// session was seen in the span.
std::optional<SessionScan> session_view(const SessionReads& file, const SessionInputs& in);
// Marks the sessions' backends as the path's backends (server CPU, ASH rows
// by their pids).
void add_session_backends(const SessionScan& s, QueryPath& qp);
// The client processes are the path's client side: their CPU is not another
// process's (f.other_cpu_ns, f.top_other) and their single_thread candidacy
// is client_process_findings'.
void remove_client_processes(const SessionScan& s, Facts& f);
// The whole file's accounting from the session view: clients = sessions,
// client_ns = session time (ASH polls × period), split as `run`'s is: the
// sessions' server waits by class (ASH), server_cpu (the backends' CPU from
// schedstat where they were sampled on this host, else ASH's on-CPU time),
// client_cpu (the client processes' CPU), run_queue (the backends' and the
// client processes' run delay), remainder (the rest: the network, the
// client's other waits). Each part takes what it measured as far as the
// session time not yet taken covers it, in that order; what does not fit
// is excess_ns. The parts add up to client_ns exactly.
Accounting session_accounting(const SessionScan& s, const WindowAcc& total, const Facts& f);
// client_cpu / single_thread findings for the client processes of a
// session view (r.sessions): a client whose hottest thread ran at ≥
// kSingleThreadMinCores of CPU is single_thread, scored by its sessions'
// idle time × min(1, thread cores) ÷ session time; else client_cpu, scored by
// min(its CPU + run delay, its sessions' idle time) ÷ session time.
void client_process_findings(const Report& r, const Facts& f, std::vector<Finding>& out);

}  // namespace stallscope::correlate::detail
