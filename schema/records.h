// Value types the producers (sampler, driver) hand to the writer. Each struct
// mirrors one table of schema/v1.sql, field for field (ProcessSampleRow and
// ThreadSampleRow: the views process_sample and thread_sample, which the
// writer stores compactly); see that file for the meaning, unit and source of
// every column. std::optional = SQL NULL.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stallscope::schema {

// The command that wrote a run file (run.mode): `run` drives and samples,
// `record` samples only, `import-pgbench` imported a pgbench log.
enum class RunMode { run, record, import_pgbench };

// run.mode's text: "run", "record", "import-pgbench".
constexpr std::string_view to_string(RunMode mode) {
  switch (mode) {
    case RunMode::run:
      return "run";
    case RunMode::record:
      return "record";
    case RunMode::import_pgbench:
      return "import-pgbench";
  }
  return "";
}

// The mode whose to_string is `text`; nullopt for any other text.
constexpr std::optional<RunMode> parse_run_mode(std::string_view text) {
  for (auto mode : {RunMode::run, RunMode::record, RunMode::import_pgbench}) {
    if (to_string(mode) == text) return mode;
  }
  return std::nullopt;
}

struct RunInfo {
  // to_string(RunMode) of the command that wrote the file.
  std::string mode;
  std::string host;
  std::string kernel;
  int cores = 0;
  long clock_ticks_per_s = 0;
  std::int64_t start_ns = 0;
  std::string command_line;             // already masked
  std::optional<std::string> conninfo;  // already masked
  std::string tool_version;
  double hz = 0;
  int stallscope_pid = 0;
  std::optional<std::int64_t> stallscope_start_ticks;
  std::optional<int> clients;
  std::optional<int> threads;
  std::optional<std::string> protocol;
  std::optional<std::string> sql;
  std::optional<std::string> server_version;
  std::optional<std::string> command;        // record -- COMMAND, already masked
  std::optional<int> delayacct_set;          // --delayacct: 1 = stallscope turned it on
  std::optional<std::string> kernel_stacks;  // --stacks: "collected" / "unavailable: ..."
  std::optional<double> rate_tps;            // run -R: transactions per second over all clients
  std::optional<std::string> machine_id;     // HostInfo::machine_id; nullopt when unknown
  std::optional<std::string> boot_id;        // HostInfo::boot_id; nullopt when unknown
};

struct SampleRow {
  std::int64_t sample_id = 0;
  std::int64_t time_ns = 0;
  std::int64_t mono_ns = 0;
  std::optional<std::int64_t> interval_ns;
  std::int64_t sampler_cpu_ns = 0;
  std::int64_t sampler_duration_ns = 0;
};

struct HostSampleRow {
  std::int64_t sample_id = 0;
  std::optional<std::int64_t> cpu_user_ns, cpu_nice_ns, cpu_system_ns, cpu_idle_ns, cpu_iowait_ns,
      cpu_irq_ns, cpu_softirq_ns, cpu_steal_ns;
  double load1 = 0, load5 = 0, load15 = 0;
  int procs_running = 0;
  int procs_blocked = 0;
  int processes_total = 0;
  int processes_d_state = 0;
};

struct ProcessRow {
  std::int64_t process_id = 0;
  int pid = 0;
  std::int64_t start_ticks = 0;
  std::optional<std::int64_t> start_ns;
  std::optional<int> ppid;
  std::string comm;
  std::optional<std::string> cmdline;
  std::int64_t first_sample_id = 0;
  std::optional<std::string> cgroup;
};

// process_poll: what a watched client process asleep in poll, select or
// epoll_wait waited on at the tick (sampler/poll_wait.h).
struct PollWaitRow {
  std::string syscall;  // "epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select",
                        // "pselect6", "read", "readv", "recvfrom", "recvmsg"
  bool timed = false;   // with a finite timeout
  // Waited fds that are sockets to another process (TCP, or a Unix socket
  // whose peer this process does not hold); nullopt when the fds could not
  // be read.
  std::optional<int> peer_sockets;
  // Of those, the database's (sampler/poll_wait.h): nullopt as peer_sockets.
  std::optional<int> database_sockets;
  // Of those, the ones with bytes queued either way (a query not yet read
  // by the server, an answer not yet read by the client): nullopt as
  // peer_sockets.
  std::optional<int> database_queued;
};

struct ProcessSampleRow {
  std::int64_t sample_id = 0;
  std::int64_t process_id = 0;
  char state = '?';
  std::optional<std::int64_t> cpu_ns;
  std::optional<std::int64_t> run_delay_ns;
  std::optional<std::int64_t> utime_ticks;
  std::optional<std::int64_t> stime_ticks;
  std::optional<std::string> wchan;       // stored once in table wchan, by id
  std::optional<std::int64_t> rss_bytes;  // whole KiB (pages): stored in KiB
  std::optional<std::int64_t> majflt;
  std::optional<std::int64_t> voluntary_ctxt_switches;
  std::optional<std::int64_t> nonvoluntary_ctxt_switches;
  std::optional<std::int64_t> span_ns;  // > 0 (stored as 0 when it equals the tick's interval_ns)
  std::optional<std::int64_t> read_bytes;
  std::optional<std::int64_t> write_bytes;
  std::optional<std::int64_t> blkio_delay_ns;
  std::optional<std::string> kernel_stack;
  std::optional<PollWaitRow> poll_wait;  // process_poll, a row only when set
};

struct ThreadSampleRow {
  std::int64_t sample_id = 0;
  std::int64_t process_id = 0;
  int tid = 0;
  std::string comm;
  char state = '?';
  std::optional<std::int64_t> cpu_ns;
  std::optional<std::int64_t> run_delay_ns;
  std::optional<std::string> wchan;
  std::optional<std::string> kernel_stack;
  std::optional<std::int64_t> span_ns;
  std::optional<PollWaitRow> poll_wait;  // a record's client thread: what it waits on
};

struct HostMemorySampleRow {
  std::int64_t sample_id = 0;
  std::optional<std::int64_t> psi_cpu_some_us, psi_cpu_full_us, psi_io_some_us, psi_io_full_us,
      psi_memory_some_us, psi_memory_full_us;
  std::optional<std::int64_t> mem_available_bytes, mem_dirty_bytes, mem_writeback_bytes,
      swap_used_bytes;
  std::optional<std::int64_t> major_faults, swap_in_pages, swap_out_pages, page_in_kib,
      page_out_kib;
};

struct DiskSampleRow {
  std::int64_t sample_id = 0;
  std::string device;
  std::int64_t reads = 0, writes = 0, read_sectors = 0, write_sectors = 0;
  std::int64_t in_flight = 0;
  std::int64_t busy_ns = 0, weighted_ns = 0, span_ns = 0;
};

struct CgroupSampleRow {
  std::int64_t sample_id = 0;
  std::string cgroup;
  std::optional<std::int64_t> nr_periods, nr_throttled, throttled_ns, span_ns;
};

struct PgQueryTextRow {
  std::int64_t query_text_id = 0;
  std::optional<std::int64_t> query_id;
  std::string query;
  std::int64_t first_time_ns = 0;
};

struct PgActivityRow {
  std::int64_t time_ns = 0;
  std::int64_t ash_tick = 0;
  int pid = 0;
  std::optional<std::string> backend_type;
  std::optional<std::string> state;
  std::optional<std::string> wait_event_type;
  std::optional<std::string> wait_event;
  std::optional<std::string> application_name;
  std::optional<std::int64_t> query_id;
  std::optional<std::int64_t> query_text_id;
  std::optional<std::string> client_addr;
  std::optional<int> client_port;
  std::optional<std::int64_t> backend_start_ns, xact_start_ns, query_start_ns, state_change_ns;
  std::optional<std::string> blocking_pids;
};

// pg_lock_wait: the ungranted pg_locks row of a Lock waiter in one ASH poll
// (schema/v1.sql).
struct PgLockWaitRow {
  std::int64_t ash_tick = 0;
  int pid = 0;
  std::string locktype;
  std::optional<std::string> mode;
  std::optional<std::int64_t> database_oid, relation_oid;
  std::optional<std::string> relation_name;
  std::optional<std::int64_t> page, tuple;
  std::optional<std::string> virtualxid;
  std::optional<std::int64_t> transactionid, classid, objid, objsubid;
  std::optional<std::string> write_relation_name;
};

// pg_session: a database session at first sight (schema/v1.sql).
struct PgSessionRow {
  std::int64_t session_id = 0;
  int pid = 0;
  std::optional<std::int64_t> backend_start_ns;
  std::optional<std::string> backend_type;
  std::optional<std::string> application_name;
  std::optional<std::string> client_addr;
  std::optional<int> client_port;
  std::optional<std::string> usename;
  std::optional<std::string> datname;
  std::int64_t first_ash_tick = 0;
  std::optional<int> client_pid;  // owner of the client's TCP socket, same host
  std::optional<std::int64_t> client_start_ticks;
};

// pg_session_idle: `polls` consecutive idle polls from first_ash_tick.
struct PgSessionIdleRow {
  std::int64_t session_id = 0;
  std::int64_t first_ash_tick = 0;
  std::int64_t polls = 0;
};

// record_client: the command record started ("command", pid and
// start_ticks) or a --client-process NAME ("comm", comm).
struct RecordClientRow {
  std::string source;
  std::optional<int> pid;
  std::optional<std::int64_t> start_ticks;
  std::optional<std::string> comm;
};

struct AshTickRow {
  std::int64_t ash_tick = 0;
  std::int64_t time_ns = 0;
  std::int64_t duration_ns = 0;
};

struct ClientRow {
  int client_id = 0;
  int connection = 0;
  int thread = 0;
  std::optional<int> backend_pid;
  std::optional<std::int64_t> connect_ns;
  std::optional<std::int64_t> connect_latency_ns;
  std::optional<std::string> application_name;
  // The client end of its TCP socket (pg_stat_activity's client_addr and
  // client_port of its backend); nullopt over a Unix socket.
  std::optional<std::string> local_addr;
  std::optional<int> local_port;
};

// One row of `query`: a transaction sent (by `run`, or read from a pgbench
// log). Kept small: the driver makes tens of thousands a second, and the
// rare failure details travel as QueryErrorRow.
struct QueryRow {
  int client_id = 0;
  std::int64_t seq = 0;       // per client
  std::int64_t start_ns = 0;  // wall clock, sent (-R: scheduled)
  std::int64_t latency_ns = 0;
  std::optional<std::int64_t> rows;    // nullopt when it failed
  std::optional<int> connection;       // ClientRow::connection that served it
  std::optional<std::int64_t> lag_ns;  // -R only
};

// The SQLSTATE of the driver's failed (re)connect attempts and -C connects,
// for which libpq gives none: sqlclient_unable_to_establish_sqlconnection.
inline constexpr const char* kConnectFailedSqlstate = "08001";

// One row of `query_error`: why the query (start_ns, client_id, seq) failed.
struct QueryErrorRow {
  int client_id = 0;
  std::int64_t seq = 0;
  std::int64_t start_ns = 0;
  std::string sqlstate;
  std::optional<std::string> error;
};

// One row of `query_skipped`: a transaction not sent (-R -L --skip-late).
struct QuerySkippedRow {
  int client_id = 0;
  std::int64_t seq = 0;
  std::int64_t start_ns = 0;  // scheduled start, wall clock
  std::int64_t lag_ns = 0;    // scheduled start → skipped
};

// One row of `query_unfinished`: a transaction sent but cut short at the
// run's end (driver/driver.h, Driver::run).
struct QueryUnfinishedRow {
  int client_id = 0;
  std::int64_t seq = 0;
  std::int64_t start_ns = 0;    // wall clock when sent (with -R: when scheduled)
  std::int64_t elapsed_ns = 0;  // start → given up on, CLOCK_MONOTONIC
  std::optional<std::int64_t> connection;
  std::optional<std::int64_t> lag_ns;  // -R only
};

// One row of `query_sleep`: the time the transaction (start_ns, client_id,
// seq) spent in \sleep.
struct QuerySleepRow {
  int client_id = 0;
  std::int64_t seq = 0;
  std::int64_t start_ns = 0;
  std::int64_t sleep_ns = 0;
};

// One row of `query_retry`: transaction (start_ns, client_id, seq) took
// `tries` tries (--max-tries), `retried_ns` of its latency in those that failed.
struct QueryRetryRow {
  int client_id = 0;
  std::int64_t seq = 0;
  std::int64_t start_ns = 0;
  std::int64_t tries = 0;
  std::int64_t retried_ns = 0;
};

struct PgbenchAggregateRow {
  std::string file;
  std::int64_t line = 0;
  std::int64_t interval_start_ns = 0;
  std::int64_t transactions = 0;
  std::int64_t latency_sum_ns = 0;
  double latency_sum2_us2 = 0;
  std::optional<std::int64_t> latency_min_ns, latency_max_ns;
  std::optional<std::int64_t> lag_sum_ns;
  std::optional<double> lag_sum2_us2;
  std::optional<std::int64_t> lag_min_ns, lag_max_ns, skipped, retried, retries;
  std::optional<std::int64_t> serialization_failures, deadlock_failures;
};

struct ClockOffsetRow {
  std::int64_t time_ns = 0;
  std::int64_t offset_ns = 0;
  std::int64_t uncertainty_ns = 0;
  std::int64_t rtt_ns = 0;
  int probes = 0;
  std::string phase;  // start | periodic | end
};

struct StatementRow {  // `run -r`
  int statement = 0;
  std::string script;
  int line = 0;
  std::string sql;
};

struct StatementLatencyRow {  // `run -r`
  std::int64_t start_ns = 0;
  int client_id = 0;
  std::int64_t seq = 0;
  int statement = 0;
  std::int64_t latency_ns = 0;
};

struct TcpSampleRow {  // TCP_INFO of a driver connection
  std::int64_t time_ns = 0;
  int client_id = 0;
  int connection = 0;
  std::int64_t rtt_ns = 0;
  std::int64_t rttvar_ns = 0;
  std::int64_t total_retrans = 0;
  std::int64_t unacked = 0;
};

// The host's TCP counters, read at a host tick about once a second
// (schema/v1.sql tcp_stack_sample: sources per column): deltas since the
// previous read of /proc/net/netstat (TcpExt) and /proc/net/snmp (Tcp),
// span_ns long. A field is absent on the first read, when the kernel lacks
// the counter, and when it went backwards.
struct TcpStackSampleRow {
  std::int64_t sample_id = 0;
  std::optional<std::int64_t> span_ns;  // since the previous read, CLOCK_MONOTONIC
  std::optional<std::int64_t> delayed_acks, delayed_ack_locked, delayed_ack_lost;
  std::optional<std::int64_t> timeouts, loss_probes, slow_start_retrans, fast_retrans, syn_retrans;
  std::optional<std::int64_t> zero_window_drop, to_zero_window_adv, want_zero_window_adv;
  std::optional<std::int64_t> rcvq_drop, listen_overflows, listen_drops;
  std::optional<std::int64_t> retrans_segs, out_segs, in_segs, in_errs, out_rsts;
};

// --pooler-admin: one database of pgbouncer's SHOW STATS + SHOW POOLS at one
// poll (schema/v1.sql pooler_sample: units and sources per column). Counter
// deltas are absent on the first poll, after a reconnect, and when a counter
// went backwards; any field is absent when pgbouncer lacks its column.
struct PoolerSampleRow {
  std::int64_t time_ns = 0;
  std::string database;
  std::optional<std::int64_t> interval_ns;
  std::optional<std::int64_t> xacts, queries;
  std::optional<std::int64_t> wait_ns, xact_ns, query_ns;
  std::optional<std::int64_t> cl_active, cl_waiting, sv_active, sv_idle, sv_used;
  std::optional<std::int64_t> maxwait_ns;
};

// ---- PostgreSQL statistics (sampler/pg_stats_sampler.cpp, on the ASH
// sampler's thread and connection; schema/v1.sql pg_setting,
// pg_stats_sample, pg_replication_sample, pg_statement_sample,
// pg_statement_text: units and sources per column) ----

// One server setting, read once when the ASH sampler first connects.
struct PgSettingRow {
  std::string name;                    // pg_settings.name
  std::optional<std::string> setting;  // pg_settings.setting, in `unit`
  std::optional<std::string> unit;     // pg_settings.unit ('kB', 'ms', '8kB', ...), absent: none
  std::int64_t time_ns = 0;            // wall clock when read
};

// One poll (about 1 Hz) of the server's cumulative counters. Absent: the
// view or column does not exist on this server, or could not be read.
struct PgStatsSampleRow {
  std::int64_t time_ns = 0;      // wall clock when the poll was sent
  std::int64_t duration_ns = 0;  // its round trip
  std::optional<std::int64_t> xact_commit, xact_rollback, temp_files,
      temp_bytes;                                                  // pg_stat_database
  std::optional<std::int64_t> wal_records, wal_fpi, wal_bytes;     // pg_stat_wal
  std::optional<std::int64_t> checkpoints_timed, checkpoints_req;  // pg_stat_bgwriter
  std::int64_t walsenders = 0;  // pg_stat_replication rows at this poll (PgReplicationRow)
  // pg_stat_statements rows stored at this poll (PgStatementRow); absent:
  // pg_stat_statements was not read at this poll.
  std::optional<std::int64_t> statements;
};

// One pg_stat_replication row (a WAL sender) at one poll.
struct PgReplicationRow {
  std::int64_t time_ns = 0;  // PgStatsSampleRow::time_ns of the poll
  int pid = 0;               // the walsender's pid
  std::optional<std::string> application_name, client_addr, state, sync_state;
  std::optional<std::int64_t> sync_priority;
  std::optional<std::int64_t> write_lag_ns, flush_lag_ns, replay_lag_ns;
  std::optional<std::int64_t> flush_behind_bytes;  // pg_current_wal_lsn() − flush_lsn
  std::optional<std::int64_t> reply_age_ns;        // clock_timestamp() − reply_time
};

// One pg_stat_statements entry of the sampled database at one snapshot:
// its cumulative counters (times in ns). Stored when its calls changed since
// the previous snapshot (every entry at the first).
struct PgStatementRow {
  std::int64_t time_ns = 0;  // PgStatsSampleRow::time_ns of the poll
  std::int64_t query_id = 0, user_id = 0, db_id = 0;
  bool toplevel = true;
  std::int64_t calls = 0;
  std::optional<std::int64_t> plans, total_plan_time_ns, total_exec_time_ns, rows;
  std::optional<std::int64_t> temp_blks_written, wal_fpi, wal_bytes;
  std::optional<std::int64_t> jit_functions, jit_generation_time_ns, jit_inlining_time_ns,
      jit_optimization_time_ns, jit_emission_time_ns;
  std::optional<std::string> query;  // its text, when read (pg_statement_text)
};

struct PgStatsRows {
  std::vector<PgSettingRow> settings;
  std::vector<PgStatsSampleRow> samples;
  std::vector<PgReplicationRow> replication;
  std::vector<PgStatementRow> statements;
  bool empty() const {
    return settings.empty() && samples.empty() && replication.empty() && statements.empty();
  }
  std::size_t size() const {
    return settings.size() + samples.size() + replication.size() + statements.size();
  }
};

// What one producer hands the writer at a time. Any vector may be empty.
// Rows are inserted in the order of the members below.
struct Batch {
  std::vector<SampleRow> samples;
  std::vector<HostSampleRow> host_samples;
  std::vector<ProcessRow> processes;
  std::vector<ProcessSampleRow> process_samples;
  std::vector<AshTickRow> ash_ticks;
  std::vector<PgActivityRow> pg_activity;
  std::vector<PgSessionRow> pg_sessions;
  std::vector<PgSessionIdleRow> pg_session_idles;
  std::vector<RecordClientRow> record_clients;
  std::vector<ClientRow> clients;
  std::vector<QueryRow> queries;
  std::vector<QueryErrorRow> query_errors;
  std::vector<QuerySkippedRow> query_skips;
  std::vector<QuerySleepRow> query_sleeps;
  std::vector<QueryRetryRow> query_retries;
  std::vector<QueryUnfinishedRow> query_unfinished;
  std::vector<ThreadSampleRow> thread_samples;
  std::vector<HostMemorySampleRow> host_memory_samples;
  std::vector<DiskSampleRow> disk_samples;
  std::vector<CgroupSampleRow> cgroup_samples;
  std::vector<PgQueryTextRow> pg_query_texts;
  std::vector<PgbenchAggregateRow> pgbench_aggregates;  // import-pgbench
  std::vector<ClockOffsetRow> clock_offsets;
  std::vector<StatementRow> statements;
  std::vector<StatementLatencyRow> statement_latencies;
  std::vector<TcpSampleRow> tcp_samples;
  std::vector<PoolerSampleRow> pooler_samples;  // --pooler-admin
  std::vector<TcpStackSampleRow> tcp_stack_samples;
  PgStatsRows pg_stats;  // PostgreSQL statistics (ASH sampler)
  std::vector<PgLockWaitRow> pg_lock_waits;

  bool empty() const {
    return samples.empty() && host_samples.empty() && processes.empty() &&
           process_samples.empty() && ash_ticks.empty() && pg_activity.empty() && clients.empty() &&
           queries.empty() && query_errors.empty() && query_skips.empty() && query_sleeps.empty() &&
           query_retries.empty() && query_unfinished.empty() && thread_samples.empty() &&
           host_memory_samples.empty() && disk_samples.empty() && cgroup_samples.empty() &&
           pg_query_texts.empty() && pgbench_aggregates.empty() && clock_offsets.empty() &&
           statements.empty() && statement_latencies.empty() && tcp_samples.empty() &&
           pooler_samples.empty() && pg_sessions.empty() && pg_session_idles.empty() &&
           record_clients.empty() && tcp_stack_samples.empty() && pg_stats.empty() &&
           pg_lock_waits.empty();
  }
};

}  // namespace stallscope::schema
