// AshSampler: active session history from pg_stat_activity, one poll every
// 1/hz s on its own thread and its own libpq connection.
#include <libpq-fe.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/parse.h"
#include "common/periodic.h"
#include "common/pg.h"
#include "common/poolers.h"
#include "common/sql_secrets.h"
#include "common/stop_watchdog.h"
#include "common/thread_name.h"
#include "common/units.h"
#include "sampler/pg_stats.h"
#include "sampler/poll_wait.h"
#include "sampler/sampler.h"

namespace stallscope::sampler {
namespace {

// {} = "query_id" on PostgreSQL 14+, else "NULL::bigint". Times as µs since
// the epoch (exact for timestamptz).
constexpr const char* kQueryFormat =
    "SELECT pid, backend_type, state, wait_event_type, wait_event, application_name, "
    "{}, host(client_addr), client_port, "
    "(extract(epoch FROM backend_start) * 1000000)::bigint, "
    "(extract(epoch FROM xact_start) * 1000000)::bigint, "
    "(extract(epoch FROM query_start) * 1000000)::bigint, "
    "(extract(epoch FROM state_change) * 1000000)::bigint, "
    "CASE WHEN wait_event_type = 'Lock' THEN array_to_string(pg_blocking_pids(pid), ',') END, "
    "query, usename, datname "
    "FROM pg_stat_activity WHERE pid <> pg_backend_pid()";
// Every session is listed, idle ones too: an idle session gets no
// pg_activity_sample row, only its place in a pg_session_idle stretch —
// unless a Lock waiter of the same poll names it in pg_blocking_pids: then
// it gets a row (state 'idle'), so the root of a lock chain is known.
// Column numbers of the query.
enum AshColumn : int {
  kPid,
  kBackendType,
  kState,
  kWaitEventType,
  kWaitEvent,
  kApplicationName,
  kQueryId,
  kClientAddr,
  kClientPort,
  kBackendStart,
  kXactStart,
  kQueryStart,
  kStateChange,
  kBlockingPids,
  kQueryText,
  kUsename,
  kDatname
};
// Polls that saw a Lock waiter: the waiters' ungranted pg_locks rows (one
// read of pg_locks). $1 is the waiters' pids as an int[] literal ("{1,2}").
// relation::regclass names a relation of the poll's database (another
// database's prints its OID). A transactionid waiter also gets the table it
// writes (a RowExclusiveLock it holds on a table): a hot row's relation,
// which its transactionid lock does not name.
constexpr const char* kLockWaitQuery =
    "WITH l AS MATERIALIZED (SELECT * FROM pg_locks WHERE pid = ANY($1::int[])) "
    "SELECT w.pid, w.locktype, w.mode, w.database::bigint, w.relation::bigint, "
    "CASE WHEN w.relation IS NOT NULL THEN w.relation::regclass::text END, w.page, w.tuple, "
    "w.virtualxid, w.transactionid::text::bigint, w.classid::bigint, w.objid::bigint, "
    "w.objsubid, CASE WHEN w.locktype = 'transactionid' THEN (SELECT r.relation::regclass::text "
    "FROM l r JOIN pg_class c ON c.oid = r.relation WHERE r.pid = w.pid AND r.granted AND "
    "r.locktype = 'relation' AND r.mode = 'RowExclusiveLock' AND c.relkind IN ('r', 'p') AND "
    "r.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "ORDER BY r.relation LIMIT 1) END FROM l w WHERE NOT w.granted";
enum LockWaitColumn : int {
  kLwPid,
  kLwLocktype,
  kLwMode,
  kLwDatabase,
  kLwRelation,
  kLwRelationName,
  kLwPage,
  kLwTuple,
  kLwVirtualxid,
  kLwTransactionid,
  kLwClassid,
  kLwObjid,
  kLwObjsubid,
  kLwWriteRelationName
};
// Distinct query texts remembered; past this the map is cleared (memory stays
// bounded) and a text seen again is stored again under a new id.
constexpr std::size_t kMaxQueryTexts = 10'000;

std::optional<std::int64_t> us_to_ns(std::optional<std::int64_t> us) {
  if (!us) return std::nullopt;
  return *us * common::kNsPerUs;
}

// latest().top_wait_event looks this far back.
constexpr std::int64_t kTopWindowNs = common::kNsPerS;

// The poll's text for `conn`'s server (query_id from PostgreSQL 14 on). It is
// sent each poll as an unnamed statement, not prepared once: behind a
// transaction-pooling pooler the next poll may reach another server
// connection, where a named prepared statement does not exist.
std::string poll_query(pg_conn* conn) {
  return fmt::format(kQueryFormat, PQserverVersion(conn) >= 140000 ? "query_id" : "NULL::bigint");
}

}  // namespace

struct AshSampler::Impl {
  AshSamplerOptions options;
  Sink sink;

  // Owned by the polling thread once it runs; replaced under conn_mu, which
  // stop()'s watchdog takes to abort a poll blocked on a hung server.
  pg::Conn conn;
  std::mutex conn_mu;
  std::string query;  // poll_query() of conn
  std::int64_t ash_tick = 0;
  RetryBackoff reconnect{100 * common::kNsPerMs, kSamplerReconnectMaxDelayNs};
  // Requested by stop(): ends a reconnect in progress on the polling thread.
  StopSource stopping;
  // Per recent poll: the "Type:Event" (or "CPU") of each active client backend.
  struct RecentPoll {
    std::int64_t mono_ns = 0;
    std::vector<std::string> events;
  };
  std::deque<RecentPoll> recent;
  // Query text → its pg_query_text id; key "#<query_id>" or "=<text>".
  std::unordered_map<std::string, std::int64_t> query_texts;
  std::int64_t next_query_text_id = 1;
  // Sessions seen in the latest poll, by (pid, backend_start ns), with the
  // idle stretch each has open (idle_polls 0: none).
  struct Session {
    std::int64_t session_id = 0;
    std::int64_t idle_first_tick = 0;
    std::int64_t idle_polls = 0;
    std::int64_t seen_tick = 0;
  };
  std::map<std::pair<int, std::int64_t>, Session> sessions;
  std::int64_t next_session_id = 1;
  int server_port = 0;  // the server's `port` setting, for tcp_socket_owner
  // pg_stat_database, pg_stat_wal, pg_stat_replication, settings and
  // pg_stat_statements, on this thread and connection (sampler/pg_stats.h).
  detail::PgStatsPoller stats;

  // Shared with other threads.
  mutable std::mutex mu;
  AshSnapshot snapshot;
  PeriodicThread thread;

  Impl(AshSamplerOptions o, Sink s) : options(std::move(o)), sink(std::move(s)) {}

  void connect(const pg::ConnectControl& control) {
    pg::Conn c = pg::connect(options.conninfo, options.application_name, control);
    {
      std::lock_guard lock(conn_mu);
      conn = std::move(c);
    }
    query = poll_query(conn.get());
    pg::Result port(PQexec(conn.get(), "SHOW port"));
    if (port && PQresultStatus(port.get()) == PGRES_TUPLES_OK && PQntuples(port.get()) == 1) {
      server_port = static_cast<int>(pg::int64_or_null(port.get(), 0, 0).value_or(0));
    }
    // The database ports a client's socket may lead to: the server's, and
    // the one this connection went through (a pooler, a forwarded port).
    if (options.client_watch) {
      options.client_watch->add_database_port(server_port);
      if (const char* p = PQport(conn.get());
          p && PQhost(conn.get()) && PQhost(conn.get())[0] != '/')
        if (const auto n = common::parse_int(p)) options.client_watch->add_database_port(*n);
    }
  }
  // A pooler holding sessions: the ports it listens on lead to the database
  // for its own clients (ClientWatch::add_database_port).
  void watch_pooler_ports(const SocketOwner& owner) const {
    if (!options.client_watch || !common::is_pooler_comm(owner.comm)) return;
    for (const int p : detail::listening_ports(owner.pid, options.proc_root))
      options.client_watch->add_database_port(p);
  }
  // Hands `s`'s open idle stretch (if any) to `batch` and closes it.
  static void close_idle(Session& s, schema::Batch& batch) {
    if (s.idle_polls == 0) return;
    batch.pg_session_idles.push_back(
        {.session_id = s.session_id, .first_ash_tick = s.idle_first_tick, .polls = s.idle_polls});
    s.idle_polls = 0;
  }
  // Every open idle stretch, as one batch for the sink.
  void flush_idle() {
    schema::Batch batch;
    for (auto& [key, s] : sessions) close_idle(s, batch);
    if (!batch.empty() && sink) sink(std::move(batch));
  }
  // The session of a row (a pg_session row into `batch` at first sight);
  // `lookups` counts the socket-owner lookups of this poll.
  Session& session_of(PGresult* res, int r, int pid, schema::Batch& batch, int& lookups);
  // An idle poll of `s`: extends its stretch or opens one.
  void add_idle(Session& s, schema::Batch& batch) const;
  void run_tick();  // reconnect if due, poll once, hand the rows to the sink
  // One poll; returns its rows, or throws Error(postgres).
  schema::Batch poll();
  std::string top_event(std::int64_t mono_ns, std::vector<std::string> events);
  // The ungranted pg_locks rows of `waiters` into `batch` (pg_lock_wait).
  void poll_lock_waits(const std::vector<int>& waiters, schema::Batch& batch);
  // The Lock waiters among a poll's rows (blocking_pids not NULL) and the
  // pids that block them.
  static void lock_waits_of(PGresult* res, std::vector<int>& waiters,
                            std::unordered_set<int>& blockers);
  // Row r of a poll as stored, its query text (masked) added to the batch
  // the first time it is seen.
  schema::PgActivityRow activity_row(PGresult* res, int r, int pid, std::int64_t wall_ns,
                                     schema::Batch& batch);
  void note_error(const std::string& message) {
    std::lock_guard lock(mu);
    ++snapshot.poll_errors;
    snapshot.last_error = message;
  }
  void drop_conn() {
    std::lock_guard lock(conn_mu);
    conn.reset();
  }
};

AshSampler::Impl::Session& AshSampler::Impl::session_of(PGresult* res, int r, int pid,
                                                        schema::Batch& batch, int& lookups) {
  const auto start_ns = us_to_ns(pg::int64_or_null(res, r, kBackendStart));
  auto [it, is_new] = sessions.try_emplace({pid, start_ns.value_or(0)});
  Session& s = it->second;
  if (!is_new) return s;
  s.session_id = next_session_id++;
  schema::PgSessionRow row{.session_id = s.session_id,
                           .pid = pid,
                           .backend_start_ns = start_ns,
                           .backend_type = pg::text_or_null(res, r, kBackendType),
                           .application_name = pg::text_or_null(res, r, kApplicationName),
                           .client_addr = pg::text_or_null(res, r, kClientAddr),
                           .usename = pg::text_or_null(res, r, kUsename),
                           .datname = pg::text_or_null(res, r, kDatname),
                           .first_ash_tick = ash_tick};
  if (auto port = pg::int64_or_null(res, r, kClientPort)) row.client_port = static_cast<int>(*port);
  // A TCP client on this host: the process that owns its end of the socket.
  if (options.find_client_sockets && row.backend_type == "client backend" && row.client_port &&
      *row.client_port > 0 && lookups < kSocketLookupsPerPoll) {
    ++lookups;
    if (auto owner = tcp_socket_owner(*row.client_port, server_port, options.proc_root)) {
      row.client_pid = owner->pid;
      row.client_start_ticks = owner->start_ticks;
      watch_pooler_ports(*owner);
    }
  } else if (options.find_client_sockets && row.backend_type == "client backend" &&
             row.client_port && *row.client_port == -1 && lookups < kSocketLookupsPerPoll) {
    // A Unix-socket client (client_port -1): the owner of its socket's peer.
    ++lookups;
    if (auto owner = unix_socket_owner(row.pid, options.proc_root)) {
      row.client_pid = owner->pid;
      row.client_start_ticks = owner->start_ticks;
      watch_pooler_ports(*owner);
    }
  }
  // The host sampler reads what this client waits on (sampler.h ClientWatch).
  if (row.client_pid && options.client_watch) options.client_watch->add_pid(*row.client_pid);
  batch.pg_sessions.push_back(std::move(row));
  return s;
}

void AshSampler::Impl::add_idle(Session& s, schema::Batch& batch) const {
  if (s.idle_polls > 0 && s.idle_first_tick + s.idle_polls == ash_tick) {
    ++s.idle_polls;
  } else {
    close_idle(s, batch);
    s.idle_first_tick = ash_tick;
    s.idle_polls = 1;
  }
  const auto max_polls =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(double(options.idle_stretch_max_ns) *
                                                          options.hz / common::kNsPerSDouble));
  if (s.idle_polls >= max_polls) close_idle(s, batch);
}

schema::Batch AshSampler::Impl::poll() {
  const std::int64_t wall_ns = wall_now_ns();
  const std::int64_t mono_ns = mono_now_ns();
  pg::Result res(PQexecParams(conn.get(), query.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0));
  const std::int64_t duration_ns = mono_now_ns() - mono_ns;
  if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    const char* state = res ? PQresultErrorField(res.get(), PG_DIAG_SQLSTATE) : nullptr;
    throw Error(ErrorKind::postgres,
                fmt::format("cannot poll pg_stat_activity: {}", pg::error_message(conn.get())), 0,
                state ? state : "");
  }
  schema::Batch batch;
  ++ash_tick;
  batch.ash_ticks.push_back({.ash_tick = ash_tick, .time_ns = wall_ns, .duration_ns = duration_ns});
  std::vector<std::string> events;
  const int rows = PQntuples(res.get());
  // The Lock waiters of this poll and the pids that block them: a blocker
  // gets a row even when it is idle.
  std::vector<int> waiters;
  std::unordered_set<int> blockers;
  lock_waits_of(res.get(), waiters, blockers);
  int lookups = 0;
  for (int r = 0; r < rows; ++r) {
    // pg_stat_activity.pid is never NULL; a row without an integer pid
    // (none so far) would name no backend, so it is not stored.
    const auto pid = pg::int64_or_null(res.get(), r, kPid);
    if (!pid) continue;
    Session& session = session_of(res.get(), r, static_cast<int>(*pid), batch, lookups);
    session.seen_tick = ash_tick;
    if (pg::text_or_null(res.get(), r, kState) == "idle" &&
        !blockers.contains(static_cast<int>(*pid))) {
      add_idle(session, batch);
      continue;
    }
    close_idle(session, batch);
    auto row = activity_row(res.get(), r, static_cast<int>(*pid), wall_ns, batch);
    // 'active' with a Client wait is a backend that already went back to
    // reading from its client (state is a snapshot, the wait event is live).
    if (row.backend_type == "client backend" && row.state == "active" &&
        row.wait_event_type != "Client") {
      events.push_back(row.wait_event_type
                           ? fmt::format("{}:{}", *row.wait_event_type, row.wait_event.value_or(""))
                           : std::string("CPU"));
    }
    batch.pg_activity.push_back(std::move(row));
  }
  if (!waiters.empty()) poll_lock_waits(waiters, batch);
  // Sessions that ended since the previous poll.
  for (auto it = sessions.begin(); it != sessions.end();) {
    if (it->second.seen_tick == ash_tick) {
      ++it;
      continue;
    }
    close_idle(it->second, batch);
    it = sessions.erase(it);
  }
  std::string top = top_event(mono_ns, std::move(events));
  {
    std::lock_guard lock(mu);
    snapshot.polls = ash_tick;
    snapshot.top_wait_event = std::move(top);
  }
  return batch;
}

void AshSampler::Impl::lock_waits_of(PGresult* res, std::vector<int>& waiters,
                                     std::unordered_set<int>& blockers) {
  for (int r = 0; r < PQntuples(res); ++r) {
    const auto pids = pg::text_or_null(res, r, kBlockingPids);
    if (!pids) continue;
    if (auto pid = pg::int64_or_null(res, r, kPid)) waiters.push_back(static_cast<int>(*pid));
    std::string_view rest(*pids);
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      if (auto b = common::parse_int(rest.substr(0, comma))) blockers.insert(*b);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
}

schema::PgActivityRow AshSampler::Impl::activity_row(PGresult* res, int r, int pid,
                                                     std::int64_t wall_ns, schema::Batch& batch) {
  schema::PgActivityRow row{
      .time_ns = wall_ns,
      .ash_tick = ash_tick,
      .pid = pid,
      .backend_type = pg::text_or_null(res, r, kBackendType),
      .state = pg::text_or_null(res, r, kState),
      .wait_event_type = pg::text_or_null(res, r, kWaitEventType),
      .wait_event = pg::text_or_null(res, r, kWaitEvent),
      .application_name = pg::text_or_null(res, r, kApplicationName),
      .query_id = pg::int64_or_null(res, r, kQueryId),
      .client_addr = pg::text_or_null(res, r, kClientAddr),
      .backend_start_ns = us_to_ns(pg::int64_or_null(res, r, kBackendStart)),
      .xact_start_ns = us_to_ns(pg::int64_or_null(res, r, kXactStart)),
      .query_start_ns = us_to_ns(pg::int64_or_null(res, r, kQueryStart)),
      .state_change_ns = us_to_ns(pg::int64_or_null(res, r, kStateChange)),
      .blocking_pids = pg::text_or_null(res, r, kBlockingPids),
  };
  if (auto port = pg::int64_or_null(res, r, kClientPort)) row.client_port = static_cast<int>(*port);
  if (row.query_id == 0) row.query_id.reset();  // 0: not computed for this statement
  if (auto text = pg::text_or_null(res, r, kQueryText); text && !text->empty()) {
    std::string key = row.query_id ? fmt::format("#{}", *row.query_id) : "=" + *text;
    auto [it, is_new] = query_texts.try_emplace(std::move(key), 0);
    if (is_new) {
      if (query_texts.size() > kMaxQueryTexts) {
        query_texts.clear();
        it = query_texts
                 .try_emplace(row.query_id ? fmt::format("#{}", *row.query_id) : "=" + *text, 0)
                 .first;
      }
      it->second = next_query_text_id++;
      batch.pg_query_texts.push_back({.query_text_id = it->second,
                                      .query_id = row.query_id,
                                      // Another session's statement may carry a password
                                      // (ALTER ROLE … PASSWORD, dblink_connect): masked
                                      // before it is stored.
                                      .query = mask_sql_secrets(*text),
                                      .first_time_ns = wall_ns});
    }
    row.query_text_id = it->second;
  }
  return row;
}

void AshSampler::Impl::poll_lock_waits(const std::vector<int>& waiters, schema::Batch& batch) {
  std::string pids = "{";
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    if (i > 0) pids += ',';
    pids += std::to_string(waiters[i]);
  }
  pids += '}';
  const char* values[] = {pids.c_str()};
  pg::Result res(PQexecParams(conn.get(), kLockWaitQuery, 1, nullptr, values, nullptr, nullptr, 0));
  if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    // The poll's rows stand without them; a broken connection fails the
    // next poll, which reconnects.
    note_error(fmt::format("cannot read pg_locks: {}", pg::error_message(conn.get())));
    return;
  }
  PGresult* r = res.get();
  for (int i = 0; i < PQntuples(r); ++i) {
    const auto pid = pg::int64_or_null(r, i, kLwPid);
    auto locktype = pg::text_or_null(r, i, kLwLocktype);
    if (!pid || !locktype) continue;
    batch.pg_lock_waits.push_back(
        {.ash_tick = ash_tick,
         .pid = static_cast<int>(*pid),
         .locktype = std::move(*locktype),
         .mode = pg::text_or_null(r, i, kLwMode),
         .database_oid = pg::int64_or_null(r, i, kLwDatabase),
         .relation_oid = pg::int64_or_null(r, i, kLwRelation),
         .relation_name = pg::text_or_null(r, i, kLwRelationName),
         .page = pg::int64_or_null(r, i, kLwPage),
         .tuple = pg::int64_or_null(r, i, kLwTuple),
         .virtualxid = pg::text_or_null(r, i, kLwVirtualxid),
         .transactionid = pg::int64_or_null(r, i, kLwTransactionid),
         .classid = pg::int64_or_null(r, i, kLwClassid),
         .objid = pg::int64_or_null(r, i, kLwObjid),
         .objsubid = pg::int64_or_null(r, i, kLwObjsubid),
         .write_relation_name = pg::text_or_null(r, i, kLwWriteRelationName)});
  }
}

std::string AshSampler::Impl::top_event(std::int64_t mono_ns, std::vector<std::string> events) {
  recent.push_back({mono_ns, std::move(events)});
  while (!recent.empty() && recent.front().mono_ns <= mono_ns - kTopWindowNs) recent.pop_front();
  std::map<std::string, int> counts;
  for (const RecentPoll& p : recent) {
    for (const std::string& e : p.events) ++counts[e];
  }
  // Most frequent; a tie goes to the name that sorts first, so it is stable.
  std::string top;
  int top_count = 0;
  for (const auto& [event, count] : counts) {
    if (count > top_count) {
      top = event;
      top_count = count;
    }
  }
  return top;
}

void AshSampler::Impl::run_tick() {
  if (!conn) {
    if (auto error = reconnect.attempt_if_due(mono_now_ns(),
                                              [this] { connect({.stop = stopping.token()}); })) {
      drop_conn();
      note_error(*error);
    }
  }
  if (!conn) return;
  std::optional<schema::Batch> batch;
  try {
    batch = poll();
  } catch (const Error& e) {
    // Server restart, terminated backend, a pooler whose server is gone, a
    // role that may not read pg_stat_activity: reconnect at the next
    // deadline, then back off while it keeps failing.
    note_error(e.what());
    {
      std::lock_guard lock(mu);
      ++snapshot.failed_polls;
      snapshot.last_poll_error = e.what();
    }
    drop_conn();
    recent.clear();
    {
      std::lock_guard lock(mu);
      snapshot.top_wait_event.clear();  // no poll until it reconnects: nothing seen
    }
    flush_idle();  // the next poll's ash_tick does not follow on
  }
  if (batch && conn) stats.tick(conn.get(), mono_now_ns(), wall_now_ns(), *batch);
  if (batch && sink) sink(std::move(*batch));
}

AshSampler::AshSampler(AshSamplerOptions options, Sink sink)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(sink))) {}

AshSampler::~AshSampler() {
  stop();
}

void AshSampler::start() {
  Impl& s = *impl_;
  if (s.thread.running()) return;
  if (!(s.options.hz > 0)) {
    throw Error(ErrorKind::usage, fmt::format("cannot poll at {} Hz: must be > 0", s.options.hz));
  }
  // Throws Error(postgres) naming the masked conninfo, Error(runtime) when
  // interrupted.
  s.connect({.deadline_mono_ns = s.options.connect_deadline_mono_ns});
  {
    // The settings and the first statistics, before the workload starts.
    schema::Batch batch;
    s.stats.first(s.conn.get(), mono_now_ns(), wall_now_ns(), batch);
    if (!batch.empty() && s.sink) s.sink(std::move(batch));
  }
  s.thread.start(kAshSamplerThreadName,
                 static_cast<std::int64_t>(common::kNsPerSDouble / s.options.hz),
                 [&s] { s.run_tick(); });
}

void AshSampler::stop() {
  if (!impl_) return;
  Impl& s = *impl_;
  s.stopping.request_stop();
  {
    // A poll (or the last statistics) blocked on a server that stopped
    // answering would hold stop() as long as the server hangs: after the
    // grace its socket is shut down, which fails it.
    StopWatchdog watchdog(kSamplerStopGraceNs, [&s] {
      std::lock_guard lock(s.conn_mu);
      if (s.conn) pg::abort_socket(s.conn.get());
    });
    s.thread.stop();
    if (s.conn) {
      // The last statistics, after the workload.
      schema::Batch batch;
      s.stats.last(s.conn.get(), wall_now_ns(), batch);
      if (!batch.empty() && s.sink) s.sink(std::move(batch));
    }
  }
  s.drop_conn();
  impl_->flush_idle();
}

AshSnapshot AshSampler::latest() const {
  std::lock_guard lock(impl_->mu);
  return impl_->snapshot;
}

}  // namespace stallscope::sampler
