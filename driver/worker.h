// Worker: one driver thread's closed loop over its clients. Each client's
// transaction is sent as soon as the previous one finished; the thread waits
// on its epoll instance for the replies and on timers (-R schedule, \sleep,
// reconnect backoff, TCP_INFO, flushing), and hands finished rows to the
// sink in batches. Internal to driver/; Driver (driver.cpp) makes one per
// thread.
//
// The class's methods live in the file named after their concern:
//   worker.cpp        the loop, timers, the end of the run, flushing
//   epoll.cpp         registering the clients' sockets with the epoll instance
//   send_receive.cpp  sending a transaction, taking its results (dispatch() of a
//                     ready socket), recording it: the per-query path, kept
//                     in one translation unit so it inlines as before
//   script_run.cpp    running scripts: \set, \sleep, binding variables, -r
//   pipeline.cpp      --pipeline
//   reconnect.cpp     resetting a broken connection; -C's connect per transaction
//   tcp_info.cpp      TCP_INFO samples
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/backoff.h"
#include "common/stop.h"
#include "common/units.h"
#include "driver/client.h"
#include "driver/driver.h"
#include "driver/epoll.h"
#include "driver/stats.h"
#include "schema/records.h"

struct pg_result;

namespace stallscope::driver::detail {

// Rows go to the sink at least this often, and whenever this many are pending.
inline constexpr std::int64_t kFlushIntervalNs = 100 * common::kNsPerMs;
inline constexpr std::size_t kFlushRows = 4096;
// The epoll wait never sleeps longer than this, so a stop is seen within it.
inline constexpr std::int64_t kPollSliceNs = 50 * common::kNsPerMs;
// At the end of the run, in-flight queries may finish on their own for this
// long; then they are cancelled (PQcancel) and given kCancelWaitNs more; a
// query cut short by that cancel, or still without reply (its connection is
// then closed), is stored as unfinished (record_unfinished).
inline constexpr std::int64_t kStopGraceNs = 200 * common::kNsPerMs;
inline constexpr std::int64_t kCancelWaitNs = 500 * common::kNsPerMs;
// A broken connection is reset at once, then after 0.1, 0.2, 0.4, 0.8 s and
// every 1 s (so a restarted server is found within a second) until it is
// back or the run ends (-T, a stop); with -t a client gives up after
// DriverOptions::give_up_after_ns of failing in a row (-C: the same for its
// connects). driver/reconnect.cpp says why this is not a RetryBackoff.
inline constexpr BackoffDelays kReconnectBackoff{.first_delay_ns = 100 * common::kNsPerMs,
                                                 .max_delay_ns = common::kNsPerS};
// Asynchronous connects ignore connect_timeout: bound each attempt ourselves.
inline constexpr std::int64_t kResetAttemptTimeoutNs = 10 * common::kNsPerS;

// Statement ids of the scripts' SQL commands, numbered in script order
// (-1 for the other commands).
std::vector<std::vector<int>> number_statements(const std::vector<Script>& scripts);

// Serves a fixed set of clients on one thread, closed loop.
class Worker {
 public:
  Worker(const DriverOptions& options, const Sink& sink, ThreadStats& stats,
         std::vector<Client*> clients, std::optional<std::int64_t> deadline_mono_ns, StopToken stop,
         std::atomic<bool>& abort, int threads)
      : threads_(threads),
        options_(options),
        sink_(sink),
        stats_(stats),
        clients_(std::move(clients)),
        deadline_mono_ns_(deadline_mono_ns),
        stop_(stop),
        abort_(abort) {
    // The script choice and -R's schedule: reproducible from --random-seed,
    // each thread its own sequence.
    const std::uint64_t thread =
        clients_.empty() ? 0 : static_cast<std::uint64_t>(clients_.front()->thread);
    rng_.seed(options.random_seed ^ (0xBF58476D1CE4E5B9ULL * (thread + 1)));
  }

  // Runs until every client is done (see Driver::run()).
  void run();

  // -r: per statement id, latency sum and executions (read after run()).
  std::vector<std::int64_t> statement_sum_ns;
  std::vector<std::int64_t> statement_count;

 private:
  bool should_stop(std::int64_t now_ns) const {
    return stop_.stop_requested() || abort_.load(std::memory_order_relaxed) ||
           (deadline_mono_ns_ && now_ns >= *deadline_mono_ns_);
  }

  // worker.cpp. tick() and plan_wait() run once per turn of the loop (per
  // query at -c 1): `inline`, defined and used in worker.cpp only, so they
  // inline into run() as when run() was one function (plan_wait() with
  // [[gnu::always_inline]]: GCC 12 keeps it out of line otherwise, which
  // callgrind counts as 2 % more instructions of the driver's own per query).
  void start(std::int64_t now_ns);        // before the loop: schedule, -r tables, first sends
  inline void tick(std::int64_t now_ns);  // each turn: stop, timers, TCP_INFO, flush
  // Registers each client's socket for what it waits for; returns how long
  // the wait may sleep (ns, ≥ 0). `unwatchable`: clients whose socket cannot
  // be registered, to be handled at once.
  inline std::int64_t plan_wait(std::int64_t now_ns, std::vector<Client*>& unwatchable);
  void advance_timers(std::int64_t now_ns);
  void advance_stop(std::int64_t now_ns);
  void finish(Client& c);
  void flush(std::int64_t now_ns);

  // epoll.cpp
  // Registers client `index`'s socket `fd` for `events` (0: none) with the
  // epoll instance, with a system call only when that changes; false when
  // the socket cannot be registered (closed under libpq).
  bool watch(Client& c, std::size_t index, int fd, std::uint32_t events);
  void unwatch(Client& c);
  void close_connection(Client& c);  // unwatch, then close the socket

  // send_receive.cpp
  void dispatch(Client& c);  // its socket is ready (or cannot be watched)
  void send_next(Client& c, std::int64_t now_ns);
  void send_transaction(Client& c);
  void send_failed(Client& c);  // a PQsend* call failed: record, reconnect
  void on_readable(Client& c);
  void drain(Client& c, bool connection_lost);
  void take_result(Client& c, const pg_result* res);
  void transaction_done(Client& c, std::int64_t now_ns);
  // What a row of record() is: a transaction, or a failed reconnect
  // attempt / -C connect (SQLSTATE 08001; counted apart, not towards -t).
  enum class RowKind { transaction, failed_connect };
  void record(Client& c, std::int64_t done_mono_ns, RowKind kind = RowKind::transaction);
  // The transaction in flight (c.sent_*_ns, c.lag_ns) was cut short at the
  // run's end: its query_unfinished row, elapsed up to `now_ns`, and its
  // query_sleep row when it was in \sleep; not counted in queries, errors
  // or tps.
  void record_unfinished(Client& c, std::int64_t now_ns);
  void record_skipped(Client& c, std::int64_t scheduled_mono_ns, std::int64_t now_ns);

  // script_run.cpp
  void start_script(Client& c);
  void pick_script(Client& c);
  void init_variables(Client& c);
  void step_script(Client& c);
  std::size_t enter_branch(Client& c, const Script& script, std::size_t index);
  std::int64_t sleep_count(const Client& c, const ScriptCommand& cmd) const;
  bool send_script_sql(Client& c, const ScriptCommand& cmd);
  // -M prepared: prepares command `command` of script `script` on c's
  // connection unless it is; throws Error (the server's SQLSTATE) when the
  // server refuses it.
  void prepare_command(Client& c, std::size_t script, std::size_t command);
  void end_script_transaction(Client& c);
  void check_transaction_closed(Client& c);
  void store_result(Client& c, const pg_result* res);
  void finish_store(Client& c);
  void store_column(Client& c, const std::string& name, const char* value);
  void pipeline_results(Client& c);
  void exit_pipeline(Client& c);
  // --max-tries (script_run.cpp): whether c's failed try is tried again;
  // begin_retry rolls it back (when a block is open) and restart_try runs
  // the script again from its start.
  bool should_retry(const Client& c, std::int64_t now_ns) const;
  void begin_retry(Client& c, std::int64_t now_ns);
  void restart_try(Client& c, std::int64_t now_ns);
  // Fills c.query_text (simple: an unset variable stays `:name`) or
  // c.param_text/param_ptrs (an unset one is NULL) for SQL command `cmd`.
  void bind_command(Client& c, const ScriptCommand& cmd);
  int send_command(Client& c, const ScriptCommand& cmd, std::size_t script, std::size_t command);
  void statement_done(Client& c, std::int64_t now_ns);
  // `sqlstate`: the server's, when it refused the script's command (a
  // prepare); else XX000.
  void script_failed(Client& c, const std::string& message,
                     const std::optional<std::string>& sqlstate = std::nullopt);

  // pipeline.cpp
  void pipeline_fill(Client& c, std::int64_t now_ns);
  bool pipeline_send_one(Client& c);
  std::optional<std::string> pipeline_bind_script(Client& c, std::size_t& sql_command);
  void pipeline_drain(Client& c);
  void pipeline_complete(Client& c, std::int64_t now_ns);
  void pipeline_lost(Client& c, std::int64_t now_ns);
  void record_entry(Client& c, Client::InFlight&& f, std::int64_t now_ns);

  // reconnect.cpp
  void begin_reset(Client& c, std::int64_t now_ns);
  void start_reset_attempt(Client& c, std::int64_t now_ns);
  void continue_reset(Client& c);
  void reset_attempt_failed(Client& c, std::int64_t now_ns, std::string message);
  // The row of the last failed attempt (if any), ending at end_mono_ns.
  void flush_failed_attempt(Client& c, std::int64_t end_mono_ns);
  void set_reconnecting(Client& c, bool on);
  // -t: transactions that count towards it (failed reconnect attempts do not).
  bool transactions_done(const Client& c) const {
    return options_.queries_per_client &&
           c.next_seq - c.attempt_rows >= *options_.queries_per_client;
  }
  bool connect_for_transaction(Client& c);
  void record_connection(Client& c, std::int64_t connect_latency_ns, std::string application_name);

  // tcp_info.cpp
  void sample_tcp(std::int64_t now_ns);

  int threads_;  // threads of the driver (-R shares the rate among them)
  const DriverOptions& options_;
  const Sink& sink_;
  ThreadStats& stats_;
  std::vector<Client*> clients_;
  std::optional<std::int64_t> deadline_mono_ns_;
  StopToken stop_;            // Driver::run()'s: the run ends when it is requested
  std::atomic<bool>& abort_;  // a thread failed (or --exit-on-abort): end the run

  int active_ = 0;
  bool stopping_ = false;
  std::int64_t stop_mono_ns_ = 0;
  std::int64_t last_flush_mono_ns_ = 0;
  std::size_t reserve_rows_ = 256;
  schema::Batch pending_;
  // -R: this thread's Poisson schedule (as pgbench's throttle_trigger).
  std::int64_t trigger_mono_ns_ = 0;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> next_gap_{1.0};
  // Statement id of command k of script s (SQL commands only, else -1).
  std::vector<std::vector<int>> statement_ids_;
  // The prepared statement's name (script_statement()) of each SQL command,
  // by statement id (so its size is the scripts' SQL commands), formatted
  // once rather than per query.
  std::vector<std::string> statement_names_;
  std::int64_t next_tcp_mono_ns_ = 0;
  // The sockets of this thread's clients with a reply to wait for. epoll,
  // not poll: the registrations stay from one wait to the next (a client
  // that sends its next query stays registered), so a wait costs no per-socket
  // wait-queue set-up and tear-down (≈ 0.2 µs instead of 0.6 µs a wait for
  // 4 sockets).
  Epoll epoll_;
};

}  // namespace stallscope::driver::detail
