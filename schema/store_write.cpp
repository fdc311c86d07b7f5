// Store's writing side (schema/store.h): the prepared INSERTs of every
// table (Store::Statements), the transaction a Batch is written in, the
// driver's query rows in key order and in multi-row INSERTs, and the
// binding of each record type to its table. Opening, creating and checking
// run files is in store.cpp.
#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <SQLiteCpp/VariadicBind.h>
#include <fmt/format.h>

#include "common/error.h"
#include "schema/bind.h"
#include "schema/row.h"
#include "schema/store.h"
#include "schema/tick_rows.h"

namespace stallscope::schema {

using detail::bind_opt;
using detail::run_row;
using detail::with_system_error;

namespace {

// Query rows a multi-row INSERT of write_queries() carries: about 0.5 µs a
// row instead of 0.85 µs one by one (measured; little gain beyond 32).
constexpr int kQueryRowsPerInsert = 32;
constexpr int kQueryColumns = 7;

// INSERT of `rows` query rows.
std::string query_sql(int rows) {
  std::string sql =
      "INSERT INTO query (start_ns, client_id, seq, latency_ns, connection, rows, lag_ns) VALUES ";
  for (int i = 0; i < rows; ++i) sql += i == 0 ? "(?,?,?,?,?,?,?)" : ",(?,?,?,?,?,?,?)";
  return sql;
}

// Binds a query row to parameters first .. first + 6 of a query_sql()
// statement.
void bind_query(Cursor& st, int first, const QueryRow& r) {
  st.bind(first, r.start_ns);
  st.bind(first + 1, r.client_id);
  st.bind(first + 2, r.seq);
  st.bind(first + 3, r.latency_ns);
  bind_opt(st, first + 4, r.connection);
  bind_opt(st, first + 5, r.rows);
  bind_opt(st, first + 6, r.lag_ns);
}

void run_cursor(Cursor& st) {
  st.step();
  st.reset();
}
}  // namespace

struct Store::Statements {
  explicit Statements(SQLite::Database& db)
      : sample(db,
               "INSERT INTO sample ("
               "sample_id, time_ns, mono_ns, interval_ns, sampler_cpu_ns,"
               " sampler_duration_ns) VALUES (?,?,?,?,?,?)"),
        host_sample(db,
                    "INSERT INTO host_sample ("
                    "sample_id, cpu_user_ns, cpu_nice_ns, cpu_system_ns,"
                    " cpu_idle_ns, cpu_iowait_ns, cpu_irq_ns, cpu_softirq_ns,"
                    " cpu_steal_ns, load1, load5, load15, procs_running,"
                    " procs_blocked, processes_total, processes_d_state) VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        process(db,
                "INSERT INTO process (process_id, pid, start_ticks, start_ns, ppid, comm, cmdline, "
                "first_sample_id, cgroup) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (process_id) DO "
                "UPDATE SET ppid = excluded.ppid, comm = excluded.comm, cmdline = "
                "excluded.cmdline, cgroup = excluded.cgroup"),
        ash_tick(db,
                 "INSERT INTO ash_tick ("
                 "ash_tick, time_ns, duration_ns) VALUES (?,?,?)"),
        pg_activity(db,
                    "INSERT INTO pg_activity_sample (time_ns, ash_tick, pid, backend_type, state, "
                    "wait_event_type, wait_event, application_name, query_id, query_text_id, "
                    "client_addr, client_port, backend_start_ns, xact_start_ns, query_start_ns, "
                    "state_change_ns, blocking_pids) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        client(db,
               "INSERT OR REPLACE INTO client ("
               "client_id, connection, thread, backend_pid, connect_ns,"
               " connect_latency_ns, application_name, local_addr, local_port)"
               " VALUES (?,?,?,?,?,?,?,?,?)"),
        query_error(db,
                    "INSERT INTO query_error ("
                    "start_ns, client_id, seq, sqlstate, error) VALUES (?,?,?,?,?)"),
        query_skipped(db,
                      "INSERT INTO query_skipped ("
                      "start_ns, client_id, seq, lag_ns) VALUES (?,?,?,?)"),
        query_sleep(db,
                    "INSERT INTO query_sleep ("
                    "start_ns, client_id, seq, sleep_ns) VALUES (?,?,?,?)"),
        query_retry(db,
                    "INSERT INTO query_retry (start_ns, client_id, seq, tries, retried_ns) "
                    "VALUES (?,?,?,?,?)"),
        query_unfinished(
            db,
            "INSERT OR REPLACE INTO query_unfinished ("
            "start_ns, client_id, seq, elapsed_ns, connection, lag_ns) VALUES (?,?,?,?,?,?)"),
        pgbench_aggregate(db,
                          "INSERT INTO pgbench_aggregate ("
                          "file, line, interval_start_ns, transactions, latency_sum_ns,"
                          " latency_sum2_us2, latency_min_ns, latency_max_ns,"
                          " lag_sum_ns, lag_sum2_us2, lag_min_ns, lag_max_ns, skipped,"
                          " retried, retries, serialization_failures, deadlock_failures) VALUES "
                          "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        clock_offset(
            db,
            "INSERT OR REPLACE INTO clock_offset ("
            "time_ns, offset_ns, uncertainty_ns, rtt_ns, probes, phase) VALUES (?,?,?,?,?,?)"),
        statement(db,
                  "INSERT OR REPLACE INTO statement ("
                  "statement, script, line, sql) VALUES (?,?,?,?)"),
        statement_latency(db,
                          "INSERT OR REPLACE INTO statement_latency ("
                          "start_ns, client_id, seq, statement, latency_ns) VALUES (?,?,?,?,?)"),
        tcp_sample(db,
                   "INSERT OR REPLACE INTO tcp_sample ("
                   "time_ns, client_id, connection, rtt_ns, rttvar_ns,"
                   " total_retrans, unacked) VALUES (?,?,?,?,?,?,?)"),
        pg_session(db,
                   "INSERT OR IGNORE INTO pg_session ("
                   "session_id, pid, backend_start_ns, backend_type,"
                   " application_name, client_addr, client_port, usename,"
                   " datname, first_ash_tick, client_pid, client_start_ticks) VALUES "
                   "(?,?,?,?,?,?,?,?,?,?,?,?)"),
        pg_session_idle(db,
                        "INSERT OR REPLACE INTO pg_session_idle ("
                        "session_id, first_ash_tick, polls) VALUES (?,?,?)"),
        record_client(db,
                      "INSERT INTO record_client ("
                      "source, pid, start_ticks, comm) VALUES (?,?,?,?)"),
        pooler_sample(db,
                      "INSERT OR REPLACE INTO pooler_sample (time_ns, database, interval_ns, "
                      "xacts, queries, wait_ns, xact_ns, query_ns, cl_active, cl_waiting, "
                      "sv_active, sv_idle, sv_used, maxwait_ns) "
                      "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        pg_stats(db),
        pg_lock_wait(db,
                     "INSERT OR IGNORE INTO pg_lock_wait ("
                     "ash_tick, pid, locktype, mode, database_oid, relation_oid,"
                     " relation_name, page, tuple, virtualxid, transactionid,"
                     " classid, objid, objsubid, write_relation_name) VALUES "
                     "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
        query(db, query_sql(1).c_str()),
        query_many(db, query_sql(kQueryRowsPerInsert).c_str()),
        depth(db),
        ticks(db) {}
  SQLite::Statement sample, host_sample, process, ash_tick, pg_activity, client, query_error,
      query_skipped, query_sleep, query_retry, query_unfinished, pgbench_aggregate, clock_offset,
      statement, statement_latency, tcp_sample;
  SQLite::Statement pg_session, pg_session_idle, record_client;  // schema version 3
  SQLite::Statement pooler_sample;                               // --pooler-admin
  // PostgreSQL statistics (PgStatsRows).
  struct PgStats {
    explicit PgStats(SQLite::Database& db)
        : setting(db,
                  "INSERT OR REPLACE INTO pg_setting ("
                  "name, setting, unit, time_ns) VALUES (?,?,?,?)"),
          sample(db,
                 "INSERT OR REPLACE INTO pg_stats_sample ("
                 "time_ns, duration_ns, xact_commit, xact_rollback, temp_files,"
                 " temp_bytes, wal_records, wal_fpi, wal_bytes,"
                 " checkpoints_timed, checkpoints_req, walsenders, statements) VALUES "
                 "(?,?,?,?,?,?,?,?,?,?,?,?,?)"),
          replication(db,
                      "INSERT OR REPLACE INTO pg_replication_sample ("
                      "time_ns, pid, application_name, client_addr, state,"
                      " sync_state, sync_priority, write_lag_ns, flush_lag_ns,"
                      " replay_lag_ns, flush_behind_bytes, reply_age_ns) VALUES "
                      "(?,?,?,?,?,?,?,?,?,?,?,?)"),
          statement(db,
                    "INSERT OR REPLACE INTO pg_statement_sample ("
                    "time_ns, query_id, user_id, db_id, toplevel, calls, plans,"
                    " total_plan_time_ns, total_exec_time_ns, rows,"
                    " temp_blks_written, wal_fpi, wal_bytes, jit_functions,"
                    " jit_generation_time_ns, jit_inlining_time_ns,"
                    " jit_optimization_time_ns, jit_emission_time_ns) VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
          text(db,
               "INSERT OR IGNORE INTO pg_statement_text ("
               "query_id, query) VALUES (?,?)") {}
    SQLite::Statement setting, sample, replication, statement, text;
  };
  PgStats pg_stats;
  SQLite::Statement pg_lock_wait;
  // The driver's rows, tens of thousands a second, bound straight through
  // sqlite3_bind_* (Cursor), kQueryRowsPerInsert rows a statement (one
  // statement execution costs about as much as inserting a row); all rows of
  // a commit are put in key order through compact keys.
  Cursor query, query_many;
  struct QueryKey {
    std::int64_t start_ns;
    std::int64_t seq;
    int client_id;
    const QueryRow* row;
  };
  std::vector<QueryKey> query_order;  // reused: its capacity stays
  // The tables the deeper sampling fills: host memory, disks, cgroups, query texts.
  struct Depth {
    explicit Depth(SQLite::Database& db)
        : host_memory(db,
                      "INSERT INTO host_memory_sample ("
                      "sample_id, psi_cpu_some_us, psi_cpu_full_us, psi_io_some_us,"
                      " psi_io_full_us, psi_memory_some_us, psi_memory_full_us,"
                      " mem_available_bytes, mem_dirty_bytes, mem_writeback_bytes,"
                      " swap_used_bytes, major_faults, swap_in_pages,"
                      " swap_out_pages, page_in_kib, page_out_kib) VALUES "
                      "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"),
          disk(db,
               "INSERT OR REPLACE INTO disk_sample ("
               "sample_id, device, reads, writes, read_sectors,"
               " write_sectors, in_flight, busy_ns, weighted_ns, span_ns) VALUES "
               "(?,?,?,?,?,?,?,?,?,?)"),
          cgroup(db,
                 "INSERT OR REPLACE INTO cgroup_sample ("
                 "sample_id, cgroup, nr_periods, nr_throttled, throttled_ns,"
                 " span_ns) VALUES (?,?,?,?,?,?)"),
          query_text(db,
                     "INSERT OR IGNORE INTO pg_query_text ("
                     "query_text_id, query_id, query, first_time_ns) VALUES (?,?,?,?)"),
          tcp_stack(db,
                    "INSERT OR REPLACE INTO tcp_stack_sample ("
                    "sample_id, span_ns, delayed_acks, delayed_ack_locked,"
                    " delayed_ack_lost, timeouts, loss_probes, slow_start_retrans,"
                    " fast_retrans, syn_retrans, zero_window_drop,"
                    " to_zero_window_adv, want_zero_window_adv, rcvq_drop,"
                    " listen_overflows, listen_drops, retrans_segs, out_segs,"
                    " in_segs, in_errs, out_rsts) VALUES "
                    "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)") {}
    SQLite::Statement host_memory, disk, cgroup, query_text;
    SQLite::Statement tcp_stack;  // tcp_stack_sample
  };
  Depth depth;
  // process_sample / thread_sample rows in their stored form (tick_rows.h).
  detail::TickRowWriter ticks;
};

Store::Store(std::unique_ptr<SQLite::Database> db, std::string path)
    : db_(std::move(db)), path_(std::move(path)) {}

Store::Store(Store&& other) noexcept
    : db_(std::move(other.db_)), path_(std::move(other.path_)), stmts_(std::move(other.stmts_)) {}

Store& Store::operator=(Store&& other) noexcept {
  if (this != &other) {
    stmts_.reset();
    db_ = std::move(other.db_);
    path_ = std::move(other.path_);
    stmts_ = std::move(other.stmts_);
  }
  return *this;
}

Store::~Store() {
  stmts_.reset();
}

void Store::prepare_statements() {
  stmts_ = std::make_unique<Statements>(*db_);
}

namespace {
// Rows of the sampler depth tables (host_memory_sample, disk_sample,
// cgroup_sample, pg_query_text); inside write()'s transaction.
template <typename Depth>
void write_depth(const Batch& b, Depth& d) {
  for (const auto& r : b.host_memory_samples) {
    auto& st = d.host_memory;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    int i = 2;
    for (const auto* v :
         {&r.psi_cpu_some_us, &r.psi_cpu_full_us, &r.psi_io_some_us, &r.psi_io_full_us,
          &r.psi_memory_some_us, &r.psi_memory_full_us, &r.mem_available_bytes, &r.mem_dirty_bytes,
          &r.mem_writeback_bytes, &r.swap_used_bytes, &r.major_faults, &r.swap_in_pages,
          &r.swap_out_pages, &r.page_in_kib, &r.page_out_kib}) {
      bind_opt(st, i++, *v);
    }
    run_row(st);
  }
  for (const auto& r : b.tcp_stack_samples) {
    auto& st = d.tcp_stack;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    int i = 2;
    for (const auto* v : {&r.span_ns,
                          &r.delayed_acks,
                          &r.delayed_ack_locked,
                          &r.delayed_ack_lost,
                          &r.timeouts,
                          &r.loss_probes,
                          &r.slow_start_retrans,
                          &r.fast_retrans,
                          &r.syn_retrans,
                          &r.zero_window_drop,
                          &r.to_zero_window_adv,
                          &r.want_zero_window_adv,
                          &r.rcvq_drop,
                          &r.listen_overflows,
                          &r.listen_drops,
                          &r.retrans_segs,
                          &r.out_segs,
                          &r.in_segs,
                          &r.in_errs,
                          &r.out_rsts}) {
      bind_opt(st, i++, *v);
    }
    run_row(st);
  }
  for (const auto& r : b.disk_samples) {
    auto& st = d.disk;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    st.bind(2, r.device);
    int i = 3;
    for (std::int64_t v : {r.reads, r.writes, r.read_sectors, r.write_sectors, r.in_flight,
                           r.busy_ns, r.weighted_ns, r.span_ns}) {
      st.bind(i++, static_cast<int64_t>(v));
    }
    run_row(st);
  }
  for (const auto& r : b.cgroup_samples) {
    auto& st = d.cgroup;
    st.bind(1, static_cast<int64_t>(r.sample_id));
    st.bind(2, r.cgroup);
    bind_opt(st, 3, r.nr_periods);
    bind_opt(st, 4, r.nr_throttled);
    bind_opt(st, 5, r.throttled_ns);
    bind_opt(st, 6, r.span_ns);
    run_row(st);
  }
  for (const auto& r : b.pg_query_texts) {
    auto& st = d.query_text;
    st.bind(1, static_cast<int64_t>(r.query_text_id));
    bind_opt(st, 2, r.query_id);
    st.bind(3, r.query);
    st.bind(4, static_cast<int64_t>(r.first_time_ns));
    run_row(st);
  }
}
}  // namespace

void Store::write(const Batch& b) {
  write(std::span<const Batch>(&b, 1));
}

void Store::write(std::span<const Batch> batches) {
  if (!stmts_) stmts_ = std::make_unique<Statements>(*db_);
  try {
    SQLite::Transaction tx(*db_);
    for (const Batch& b : batches) write_rows(b);
    write_queries(batches);
    tx.commit();
  } catch (const SQLite::Exception& e) {
    stmts_->ticks.forget();  // the names it inserted were rolled back
    throw Error(ErrorKind::sqlite,
                fmt::format("cannot write to {}: {}", path_, with_system_error(*db_, e.what())),
                e.getExtendedErrorCode());
  } catch (...) {
    stmts_->ticks.forget();
    throw;
  }
}

void Store::write_queries(std::span<const Batch> batches) {
  auto& s = *stmts_;
  try {
    // In key order, so the table (clustered by start time) is appended to
    // rather than split page by page.
    auto& order = s.query_order;
    order.clear();
    for (const Batch& b : batches) {
      for (const auto& r : b.queries) order.push_back({r.start_ns, r.seq, r.client_id, &r});
    }
    std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) {
      return std::tie(x.start_ns, x.client_id, x.seq) < std::tie(y.start_ns, y.client_id, y.seq);
    });
    std::size_t i = 0;
    for (; i + kQueryRowsPerInsert <= order.size(); i += kQueryRowsPerInsert) {
      for (int k = 0; k < kQueryRowsPerInsert; ++k) {
        bind_query(s.query_many, k * kQueryColumns + 1,
                   *order[i + static_cast<std::size_t>(k)].row);
      }
      run_cursor(s.query_many);
    }
    for (; i < order.size(); ++i) {
      bind_query(s.query, 1, *order[i].row);
      run_cursor(s.query);
    }
  } catch (const SqliteError& e) {
    s.query.reset();  // a failed step leaves the statement to be reset
    s.query_many.reset();
    throw Error(ErrorKind::sqlite, fmt::format("cannot write to {}: {}", path_, e.what()),
                e.code());
  }
}

namespace {
// Binds one row's values to its table's INSERT (Statements), in column order.
void bind_row(SQLite::Statement& st, const SampleRow& r) {
  st.bind(1, static_cast<int64_t>(r.sample_id));
  st.bind(2, static_cast<int64_t>(r.time_ns));
  st.bind(3, static_cast<int64_t>(r.mono_ns));
  bind_opt(st, 4, r.interval_ns);
  st.bind(5, static_cast<int64_t>(r.sampler_cpu_ns));
  st.bind(6, static_cast<int64_t>(r.sampler_duration_ns));
}

void bind_row(SQLite::Statement& st, const HostSampleRow& r) {
  st.bind(1, static_cast<int64_t>(r.sample_id));
  bind_opt(st, 2, r.cpu_user_ns);
  bind_opt(st, 3, r.cpu_nice_ns);
  bind_opt(st, 4, r.cpu_system_ns);
  bind_opt(st, 5, r.cpu_idle_ns);
  bind_opt(st, 6, r.cpu_iowait_ns);
  bind_opt(st, 7, r.cpu_irq_ns);
  bind_opt(st, 8, r.cpu_softirq_ns);
  bind_opt(st, 9, r.cpu_steal_ns);
  st.bind(10, r.load1);
  st.bind(11, r.load5);
  st.bind(12, r.load15);
  st.bind(13, r.procs_running);
  st.bind(14, r.procs_blocked);
  st.bind(15, r.processes_total);
  st.bind(16, r.processes_d_state);
}

void bind_row(SQLite::Statement& st, const ProcessRow& r) {
  st.bind(1, static_cast<int64_t>(r.process_id));
  st.bind(2, r.pid);
  st.bind(3, static_cast<int64_t>(r.start_ticks));
  bind_opt(st, 4, r.start_ns);
  bind_opt(st, 5, r.ppid);
  st.bind(6, r.comm);
  bind_opt(st, 7, r.cmdline);
  st.bind(8, static_cast<int64_t>(r.first_sample_id));
  bind_opt(st, 9, r.cgroup);
}

void bind_row(SQLite::Statement& st, const PgSessionRow& r) {
  st.bind(1, static_cast<int64_t>(r.session_id));
  st.bind(2, r.pid);
  bind_opt(st, 3, r.backend_start_ns);
  bind_opt(st, 4, r.backend_type);
  bind_opt(st, 5, r.application_name);
  bind_opt(st, 6, r.client_addr);
  bind_opt(st, 7, r.client_port);
  bind_opt(st, 8, r.usename);
  bind_opt(st, 9, r.datname);
  st.bind(10, static_cast<int64_t>(r.first_ash_tick));
  bind_opt(st, 11, r.client_pid);
  bind_opt(st, 12, r.client_start_ticks);
}

void bind_row(SQLite::Statement& st, const PgSessionIdleRow& r) {
  st.bind(1, static_cast<int64_t>(r.session_id));
  st.bind(2, static_cast<int64_t>(r.first_ash_tick));
  st.bind(3, static_cast<int64_t>(r.polls));
}

void bind_row(SQLite::Statement& st, const PgLockWaitRow& r) {
  st.bind(1, static_cast<int64_t>(r.ash_tick));
  st.bind(2, r.pid);
  st.bind(3, r.locktype);
  bind_opt(st, 4, r.mode);
  bind_opt(st, 5, r.database_oid);
  bind_opt(st, 6, r.relation_oid);
  bind_opt(st, 7, r.relation_name);
  bind_opt(st, 8, r.page);
  bind_opt(st, 9, r.tuple);
  bind_opt(st, 10, r.virtualxid);
  bind_opt(st, 11, r.transactionid);
  bind_opt(st, 12, r.classid);
  bind_opt(st, 13, r.objid);
  bind_opt(st, 14, r.objsubid);
  bind_opt(st, 15, r.write_relation_name);
}

void bind_row(SQLite::Statement& st, const RecordClientRow& r) {
  st.bind(1, r.source);
  bind_opt(st, 2, r.pid);
  bind_opt(st, 3, r.start_ticks);
  bind_opt(st, 4, r.comm);
}

void bind_row(SQLite::Statement& st, const AshTickRow& r) {
  st.bind(1, static_cast<int64_t>(r.ash_tick));
  st.bind(2, static_cast<int64_t>(r.time_ns));
  st.bind(3, static_cast<int64_t>(r.duration_ns));
}

void bind_row(SQLite::Statement& st, const PgActivityRow& r) {
  st.bind(1, static_cast<int64_t>(r.time_ns));
  st.bind(2, static_cast<int64_t>(r.ash_tick));
  st.bind(3, r.pid);
  bind_opt(st, 4, r.backend_type);
  bind_opt(st, 5, r.state);
  bind_opt(st, 6, r.wait_event_type);
  bind_opt(st, 7, r.wait_event);
  bind_opt(st, 8, r.application_name);
  bind_opt(st, 9, r.query_id);
  bind_opt(st, 10, r.query_text_id);
  bind_opt(st, 11, r.client_addr);
  bind_opt(st, 12, r.client_port);
  bind_opt(st, 13, r.backend_start_ns);
  bind_opt(st, 14, r.xact_start_ns);
  bind_opt(st, 15, r.query_start_ns);
  bind_opt(st, 16, r.state_change_ns);
  bind_opt(st, 17, r.blocking_pids);
}

void bind_row(SQLite::Statement& st, const ClientRow& r) {
  st.bind(1, r.client_id);
  st.bind(2, r.connection);
  st.bind(3, r.thread);
  bind_opt(st, 4, r.backend_pid);
  bind_opt(st, 5, r.connect_ns);
  bind_opt(st, 6, r.connect_latency_ns);
  bind_opt(st, 7, r.application_name);
  bind_opt(st, 8, r.local_addr);
  bind_opt(st, 9, r.local_port);
}

void bind_row(SQLite::Statement& st, const QueryErrorRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, r.sqlstate);
  bind_opt(st, 5, r.error);
}

void bind_row(SQLite::Statement& st, const QuerySkippedRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, static_cast<int64_t>(r.lag_ns));
}

void bind_row(SQLite::Statement& st, const QueryUnfinishedRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, static_cast<int64_t>(r.elapsed_ns));
  bind_opt(st, 5, r.connection);
  bind_opt(st, 6, r.lag_ns);
}

void bind_row(SQLite::Statement& st, const QuerySleepRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, static_cast<int64_t>(r.sleep_ns));
}

void bind_row(SQLite::Statement& st, const QueryRetryRow& r) {
  SQLite::bind(st, static_cast<int64_t>(r.start_ns), r.client_id, static_cast<int64_t>(r.seq),
               static_cast<int64_t>(r.tries), static_cast<int64_t>(r.retried_ns));
}

void bind_row(SQLite::Statement& st, const PgbenchAggregateRow& r) {
  st.bind(1, r.file);
  st.bind(2, static_cast<int64_t>(r.line));
  st.bind(3, static_cast<int64_t>(r.interval_start_ns));
  st.bind(4, static_cast<int64_t>(r.transactions));
  st.bind(5, static_cast<int64_t>(r.latency_sum_ns));
  st.bind(6, r.latency_sum2_us2);
  bind_opt(st, 7, r.latency_min_ns);
  bind_opt(st, 8, r.latency_max_ns);
  bind_opt(st, 9, r.lag_sum_ns);
  bind_opt(st, 10, r.lag_sum2_us2);
  bind_opt(st, 11, r.lag_min_ns);
  bind_opt(st, 12, r.lag_max_ns);
  bind_opt(st, 13, r.skipped);
  bind_opt(st, 14, r.retried);
  bind_opt(st, 15, r.retries);
  bind_opt(st, 16, r.serialization_failures);
  bind_opt(st, 17, r.deadlock_failures);
}

void bind_row(SQLite::Statement& st, const ClockOffsetRow& r) {
  st.bind(1, static_cast<int64_t>(r.time_ns));
  st.bind(2, static_cast<int64_t>(r.offset_ns));
  st.bind(3, static_cast<int64_t>(r.uncertainty_ns));
  st.bind(4, static_cast<int64_t>(r.rtt_ns));
  st.bind(5, r.probes);
  st.bind(6, r.phase);
}

void bind_row(SQLite::Statement& st, const StatementRow& r) {
  st.bind(1, r.statement);
  st.bind(2, r.script);
  st.bind(3, r.line);
  st.bind(4, r.sql);
}

void bind_row(SQLite::Statement& st, const StatementLatencyRow& r) {
  st.bind(1, static_cast<int64_t>(r.start_ns));
  st.bind(2, r.client_id);
  st.bind(3, static_cast<int64_t>(r.seq));
  st.bind(4, r.statement);
  st.bind(5, static_cast<int64_t>(r.latency_ns));
}

void bind_row(SQLite::Statement& st, const TcpSampleRow& r) {
  st.bind(1, static_cast<int64_t>(r.time_ns));
  st.bind(2, r.client_id);
  st.bind(3, r.connection);
  st.bind(4, static_cast<int64_t>(r.rtt_ns));
  st.bind(5, static_cast<int64_t>(r.rttvar_ns));
  st.bind(6, static_cast<int64_t>(r.total_retrans));
  st.bind(7, static_cast<int64_t>(r.unacked));
}

void bind_row(SQLite::Statement& st, const PoolerSampleRow& r) {
  int i = 1;
  st.bind(i++, static_cast<int64_t>(r.time_ns));
  st.bind(i++, r.database);
  for (const auto* v :
       {&r.interval_ns, &r.xacts, &r.queries, &r.wait_ns, &r.xact_ns, &r.query_ns, &r.cl_active,
        &r.cl_waiting, &r.sv_active, &r.sv_idle, &r.sv_used, &r.maxwait_ns}) {
    bind_opt(st, i++, *v);
  }
}

void bind_row(SQLite::Statement& st, const PgSettingRow& r) {
  st.bind(1, r.name);
  bind_opt(st, 2, r.setting);
  bind_opt(st, 3, r.unit);
  st.bind(4, static_cast<int64_t>(r.time_ns));
}

void bind_row(SQLite::Statement& st, const PgStatsSampleRow& r) {
  int i = 1;
  st.bind(i++, static_cast<int64_t>(r.time_ns));
  st.bind(i++, static_cast<int64_t>(r.duration_ns));
  for (const auto* v :
       {&r.xact_commit, &r.xact_rollback, &r.temp_files, &r.temp_bytes, &r.wal_records, &r.wal_fpi,
        &r.wal_bytes, &r.checkpoints_timed, &r.checkpoints_req}) {
    bind_opt(st, i++, *v);
  }
  st.bind(i++, static_cast<int64_t>(r.walsenders));
  bind_opt(st, i++, r.statements);
}

void bind_row(SQLite::Statement& st, const PgReplicationRow& r) {
  int i = 1;
  st.bind(i++, static_cast<int64_t>(r.time_ns));
  st.bind(i++, r.pid);
  for (const auto* v : {&r.application_name, &r.client_addr, &r.state, &r.sync_state}) {
    bind_opt(st, i++, *v);
  }
  for (const auto* v : {&r.sync_priority, &r.write_lag_ns, &r.flush_lag_ns, &r.replay_lag_ns,
                        &r.flush_behind_bytes, &r.reply_age_ns}) {
    bind_opt(st, i++, *v);
  }
}

void bind_row(SQLite::Statement& st, const PgStatementRow& r) {
  int i = 1;
  st.bind(i++, static_cast<int64_t>(r.time_ns));
  st.bind(i++, static_cast<int64_t>(r.query_id));
  st.bind(i++, static_cast<int64_t>(r.user_id));
  st.bind(i++, static_cast<int64_t>(r.db_id));
  st.bind(i++, r.toplevel ? 1 : 0);
  st.bind(i++, static_cast<int64_t>(r.calls));
  for (const auto* v :
       {&r.plans, &r.total_plan_time_ns, &r.total_exec_time_ns, &r.rows, &r.temp_blks_written,
        &r.wal_fpi, &r.wal_bytes, &r.jit_functions, &r.jit_generation_time_ns,
        &r.jit_inlining_time_ns, &r.jit_optimization_time_ns, &r.jit_emission_time_ns}) {
    bind_opt(st, i++, *v);
  }
}

// Inserts `rows` with `st`, one statement step each: no allocation per row.
template <typename Row>
void write_each(SQLite::Statement& st, const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    bind_row(st, r);
    run_row(st);
  }
}

// PostgreSQL statistics; inside write()'s transaction.
template <typename PgStats>
void write_pg_stats(const PgStatsRows& rows, PgStats& st) {
  write_each(st.setting, rows.settings);
  write_each(st.sample, rows.samples);
  write_each(st.replication, rows.replication);
  write_each(st.statement, rows.statements);
  for (const auto& r : rows.statements) {
    if (!r.query) continue;
    st.text.bind(1, static_cast<int64_t>(r.query_id));
    st.text.bind(2, *r.query);
    run_row(st.text);
  }
}
}  // namespace

void Store::write_rows(const Batch& b) {
  auto& s = *stmts_;
  try {
    write_each(s.sample, b.samples);
    write_each(s.host_sample, b.host_samples);
    write_each(s.process, b.processes);
    s.ticks.write_process_samples(b.process_samples);
    write_each(s.ash_tick, b.ash_ticks);
    write_each(s.pg_activity, b.pg_activity);
    write_each(s.pg_session, b.pg_sessions);
    write_each(s.pg_session_idle, b.pg_session_idles);
    write_each(s.record_client, b.record_clients);
    write_each(s.client, b.clients);
    // Query rows: write_queries(), in key order over all batches.
    write_each(s.query_error, b.query_errors);
    write_each(s.query_skipped, b.query_skips);
    write_each(s.query_sleep, b.query_sleeps);
    write_each(s.query_retry, b.query_retries);
    write_each(s.query_unfinished, b.query_unfinished);
    write_each(s.pgbench_aggregate, b.pgbench_aggregates);
    write_each(s.clock_offset, b.clock_offsets);
    write_each(s.statement, b.statements);
    write_each(s.statement_latency, b.statement_latencies);
    write_each(s.tcp_sample, b.tcp_samples);
    write_each(s.pooler_sample, b.pooler_samples);
    write_pg_stats(b.pg_stats, s.pg_stats);
    write_each(s.pg_lock_wait, b.pg_lock_waits);
    s.ticks.write_thread_samples(b.thread_samples);
    write_depth(b, s.depth);
  } catch (const SQLite::Exception& e) {
    throw Error(ErrorKind::sqlite, fmt::format("cannot write to {}: {}", path_, e.what()),
                e.getExtendedErrorCode());
  }
}

}  // namespace stallscope::schema
