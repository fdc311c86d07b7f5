// The query driver: `clients` libpq connections spread over `threads`
// threads, closed loop (each client sends its next transaction as soon as
// the previous one finished), every transaction handed to a sink as a
// schema::QueryRow (plus a QueryErrorRow when it failed, or only a
// QuerySkippedRow when --skip-late did not send it, or only a
// QueryUnfinishedRow when the run's end cut it short). libpq's asynchronous
// API lets one thread serve several clients, as pgbench does.
//
//   driver::Driver d(options, [&](schema::Batch b) { writer.submit(std::move(b)); });
//   d.connect();   // client 0 + checks; throws Error(postgres) naming the masked conninfo
//   d.run(stop);   // blocks until -T / -t is reached or `stop` (a StopToken) is requested
//   auto s = d.summary();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/stop.h"
#include "common/units.h"
#include "driver/script.h"
#include "schema/records.h"

namespace stallscope::driver {

using Sink = std::function<void(schema::Batch)>;

enum class Protocol { simple, extended, prepared };  // pgbench -M

struct DriverOptions {
  std::string conninfo;              // anything libpq accepts; empty = PG* environment
  int clients = 1;                   // -c
  int threads = 1;                   // -j (clamped to clients)
  std::optional<double> duration_s;  // -T; exactly one of these two is set
  std::optional<std::int64_t> queries_per_client;  // -t
  std::string sql;  // one transaction; in simple mode may hold several statements
  // Where `sql` came from, for messages ("bench.sql:3"); empty for --sql.
  std::string sql_origin;
  Protocol protocol = Protocol::simple;
  // -C: every transaction opens its own connection (synchronously, as
  // pgbench -C does) and closes it after; the connect time is part of the
  // transaction's latency and each connection gets its own `client` row.
  bool connect_per_transaction = false;
  // -R: transactions are scheduled as a Poisson process of this many per
  // second over all clients (each thread gets rate/threads, as in pgbench); a
  // client free before its scheduled start waits for it. Latency counts from
  // the scheduled start; the schedule lag (scheduled start → sent) is stored.
  std::optional<double> rate_tps;
  // -L: transactions whose latency exceeds this are counted as late.
  std::optional<double> latency_limit_ms;
  // --skip-late (needs -R and -L): a transaction already later than -L when
  // its client is free is not sent but recorded as skipped.
  bool skip_late = false;
  // Scripts (-f with meta-commands or weights, -S, -b): when not empty they
  // replace `sql`: each transaction runs one script, chosen by weight, its
  // SQL commands one by one (prepared mode: each prepared once per
  // connection). `variables` names their variables; `scale` (if used) is
  // read from pgbench_branches for the built-ins, else 1.
  std::vector<Script> scripts;
  Variables variables;
  std::optional<std::int64_t> scale;  // value of :scale; unset = as described above
  // -D NAME=VALUE: initial values of script variables, as text (read by an
  // expression as pgbench reads it: an integer, a double, a boolean word or
  // null).
  std::vector<std::pair<std::string, std::string>> defines;
  // --random-seed: the seed of every client's generator for the scripts'
  // random functions (client k's is derived from it and k), also :random_seed;
  // :default_seed (hash() and permute()'s) is drawn from it.
  std::uint64_t random_seed = 0;
  // --pipeline N (0 = off): libpq pipeline mode, up to N transactions in
  // flight per connection, each sent with its own Sync (so a failure aborts
  // only its own transaction). Supported: transactions of one SQL statement
  // (--sql / -f with one statement, or scripts of one SQL command each, with
  // \set but no \sleep), not with -C or -R, N in 1..256 (their results
  // must fit the socket buffers); -M simple sends the text with the values in
  // place through the extended protocol's unnamed statement (the simple
  // protocol cannot be pipelined). Latency of each transaction: its own send → its own
  // Sync result. connect() throws Error(usage) otherwise.
  int pipeline = 0;
  // -r: per-statement latencies: every SQL command of every transaction is
  // delivered as a schema::StatementLatencyRow, the commands themselves as
  // schema::StatementRow (by connect()), and summary().statements has their
  // means. Needs scripts (run_command turns --sql into a one-script set).
  bool per_statement = false;
  // TCP_INFO of every TCP connection (schema::TcpSampleRow) at most this
  // often, read by the driver thread that owns the socket; 0 = never.
  std::int64_t tcp_info_period_ns = common::kNsPerS;
  // -t: a client whose connection stays lost (every reconnect attempt, or
  // -C connect, failing) for this long gives up (-T: clients never give up
  // before the run's end).
  std::int64_t give_up_after_ns = 60 * common::kNsPerS;
  // --max-tries: a script's transaction that fails with a serialization
  // failure (40001) or a deadlock (40P01) is rolled back and run again from
  // the script's start, with the random state it started with, up to this
  // many tries in all (0: no limit but -T's end and -L), as pgbench 15's;
  // its latency counts from the first try. 1: no retry.
  int max_tries = 1;
  // --verbose-errors: each retried or finally failed try on stderr, as
  // pgbench's ("client 3 repeats the transaction after the error (try 1/3): …").
  bool verbose_errors = false;
  // --exit-on-abort: the run ends at the first transaction that fails for
  // good (pgbench aborts that client, and with this option the run);
  // summary().ended_on_failure says so.
  bool exit_on_abort = false;
};

// -r: mean latency of one SQL command of the scripts.
struct StatementStats {
  int statement = 0;  // schema::StatementRow::statement
  std::string script;
  int line = 0;
  std::string sql;
  std::int64_t executions = 0;
  double mean_latency_ms = 0;
};

// Figures over an interval, for progress lines.
// As pgbench's: latency figures and tps are over the successful
// transactions; failed ones are counted in `errors` (and in `queries`).
struct IntervalStats {
  std::int64_t queries = 0;  // completed in the interval (ok + failed)
  std::int64_t errors = 0;
  // Failed reconnect attempts and -C connects (not in queries or errors).
  std::int64_t connect_failures = 0;
  double mean_latency_ms = 0;  // successful transactions only
  double p99_latency_ms = 0;   // successful only; from a log-bucketed histogram, ±3 %
  std::int64_t interval_ns = 0;
  std::optional<double> mean_lag_ms;  // -R only: mean schedule lag of those sent
  std::int64_t skipped = 0;           // --skip-late only
  std::int64_t late = 0;              // -L only: latency above the limit
  std::int64_t reconnecting = 0;      // clients without a connection now, reconnecting
};

struct Summary {
  // Transactions completed (ok + failed): with -t, exactly -t per client
  // that did not give up, less those --skip-late skipped. Failed reconnect
  // attempts and -C connects are not transactions: they are counted in
  // connect_failures only (their rows are the `query` rows with SQLSTATE
  // 08001), and the transactions cut short at the end in unfinished only
  // (query_unfinished rows).
  std::int64_t queries = 0;
  std::int64_t errors = 0;  // failed, of `queries`
  std::int64_t connect_failures = 0;
  std::int64_t unfinished = 0;
  // Driving time: all clients connected (-T starts) → every client done
  // (-T's deadline, or the last of -t's transactions, plus the wind-down of
  // those in flight) — not the span of the queries, which a slow -R
  // schedule leaves much shorter. While run() goes on: until now.
  std::int64_t elapsed_ns = 0;
  double tps = 0;              // successful transactions per second of elapsed_ns, as pgbench's tps
  double mean_latency_ms = 0;  // successful transactions only
  double p99_latency_ms = 0;
  std::optional<double> mean_lag_ms;  // -R only
  std::optional<double> max_lag_ms;   // -R only
  std::int64_t skipped = 0;           // --skip-late: not sent (not in `queries`)
  std::int64_t late = 0;              // -L: latency above the limit
  std::int64_t connections = 0;       // connections opened, incl. reconnects and -C
  std::int64_t clients_lost = 0;      // -t: clients that gave up reconnecting
  // --max-tries: transactions tried more than once, and their extra tries;
  // failed transactions (of `errors`) by kind, as --failures-detailed prints.
  std::int64_t retried = 0;
  std::int64_t retries = 0;
  std::int64_t serialization_failures = 0;
  std::int64_t deadlock_failures = 0;
  bool ended_on_failure = false;           // --exit-on-abort ended the run
  std::vector<StatementStats> statements;  // -r only, after run()
};

class Driver {
 public:
  Driver(DriverOptions options, Sink sink);
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // Opens client 0's connection (application_name "stallscope/<client>")
  // on the calling thread, checks the SQL there (prepared mode: PQprepare)
  // and delivers its `client` row (with -C it closes it again: transactions
  // connect anew). The other clients connect in run(). Throws Error(usage)
  // for -R/-L/--skip-late values that make no sense, Error(postgres) when
  // client 0 cannot connect (naming the masked conninfo), Error(usage) for
  // SQL that cannot be prepared or a protocol that cannot run it.
  void connect();
  // Starts the driver threads (client i on thread i % threads). Each opens
  // its own clients' connections, in parallel, as pgbench's threads do (a
  // backend's first exchanges are then with the thread that drives it, so
  // the scheduler tends to keep the two on one CPU), and delivers their
  // `client` rows; once all are connected, -T starts and the threads run
  // the closed loop. A connection that fails here fails run() with
  // Error(postgres) before any query is sent. Returns when every client is
  // done or once `stop` is requested (polled at least every 50 ms; the
  // default token never is; tools/run_command.cpp passes
  // global_stop_token(), which SIGINT/SIGTERM set).
  // A failing query is recorded with its SQLSTATE and the run goes on; after
  // a failure that leaves an explicit transaction aborted the driver sends a
  // ROLLBACK (not recorded) before the next transaction. A broken connection
  // is recorded (the transactions in flight fail with the server's SQLSTATE,
  // e.g. 57P01, or 08006) and reset: at once, then with backoff 0.1 s, 0.2 s,
  // 0.4 s, 0.8 s and every 1 s after, until it is back or the run ends (-T,
  // `stop`). Each failed attempt is a failed query row (SQLSTATE 08001,
  // error "cannot reconnect: <libpq message>", no connection) whose start is
  // the end of the client's previous row, so the rows cover the whole
  // outage; they are not transactions: not counted towards -t nor in
  // summary().queries/errors, but in connect_failures. The new backend is
  // delivered as a `client` row with the next connection number; every
  // query row carries the backend pid that served it; with -C a failed
  // connect is recorded the same way (SQLSTATE 08001, the error naming the
  // masked conninfo; its row spans the connect). With -t a client still
  // failing after give_up_after_ns gives up (server_lost() says when all
  // did); the others go on. At the end (-T reached or `stop` requested)
  // nothing new is sent; in-flight transactions get 200 ms to finish, then a
  // cancel request and 500 ms more, else their connection is closed. A
  // transaction cut short — by that cancel request (57014 after it), still
  // without reply, in a script's \sleep, or (-C) in its connect — is
  // delivered as a schema::QueryUnfinishedRow (its start, as a query row's,
  // and the time from it to the moment the driver gave up on it), not as a
  // query row: not counted in queries, errors or tps, as pgbench does not
  // count unfinished transactions, but in summary().unfinished. Rows reach
  // the sink in batches from each thread: every 100 ms, every 4,096 rows and
  // at the end. Server notices are discarded. Connections are closed when
  // run() returns.
  void run(StopToken stop = {});
  // Stats since the previous call (thread-safe; for the progress line).
  IntervalStats take_interval_stats();
  Summary summary() const;
  // server_version of the first connection, after connect().
  std::string server_version() const;
  // After run(): when every client gave up reconnecting (-t; see run()), the
  // last failure's message ("cannot reconnect: …"); else nullopt.
  std::optional<std::string> server_lost() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parses "simple" / "extended" / "prepared"; throws Error(usage) otherwise.
Protocol parse_protocol(const std::string& name);
const char* protocol_name(Protocol p);

}  // namespace stallscope::driver
