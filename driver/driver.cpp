#include "driver/driver.h"

#include <libpq-fe.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/conninfo.h"
#include "common/error.h"
#include "common/latency_histogram.h"
#include "common/pg.h"
#include "common/stop.h"
#include "common/thread_name.h"

namespace stallscope::driver {
namespace detail {
namespace {

constexpr const char* kStatementName = "stallscope";
// Rows go to the sink at least this often, and whenever this many are pending.
constexpr std::int64_t kFlushIntervalNs = 100'000'000;
constexpr std::size_t kFlushRows = 4096;
// poll() never sleeps longer than this, so the stop flag is seen within it.
constexpr std::int64_t kPollSliceNs = 50'000'000;
// At the end of the run, in-flight queries may finish on their own for this
// long; then they are cancelled (PQcancel) and given kCancelWaitNs more; a
// query still without reply is recorded as cancelled and its connection closed.
constexpr std::int64_t kStopGraceNs = 200'000'000;
constexpr std::int64_t kCancelWaitNs = 500'000'000;
// A broken connection is reset at once, then after 0.1, 0.2, 0.4, 0.8, 1.6 s;
// after kMaxResetAttempts failures its client stops.
constexpr int kMaxResetAttempts = 6;
constexpr std::int64_t kFirstBackoffNs = 100'000'000;
// Asynchronous connects ignore connect_timeout: bound each attempt ourselves.
constexpr std::int64_t kResetAttemptTimeoutNs = 10'000'000'000;

// --pipeline N: at most this many transactions in flight per connection.
constexpr int kMaxPipeline = 256;

// SQLSTATEs for failures libpq reports without one.
constexpr const char* kConnectionFailure = "08006";
constexpr const char* kInternalError = "XX000";
constexpr const char* kQueryCanceled = "57014";

// The epoll instance of a driver thread; closed on destruction.
class Epoll {
 public:
  Epoll() : fd_(epoll_create1(EPOLL_CLOEXEC)) {
    if (fd_ < 0) {
      throw Error(ErrorKind::runtime, fmt::format("cannot create the driver's epoll instance: {}",
                                                  std::strerror(errno)));
    }
  }
  Epoll(const Epoll&) = delete;
  Epoll& operator=(const Epoll&) = delete;
  ~Epoll() { ::close(fd_); }
  int fd() const { return fd_; }

 private:
  int fd_;
};

struct CancelDeleter {
  void operator()(PGcancel* c) const noexcept { PQfreeCancel(c); }
};
using Cancel = std::unique_ptr<PGcancel, CancelDeleter>;

// Server notices (e.g. "there is no transaction in progress") would go to
// stderr once per transaction; the driver drops them.
void discard_notice(void*, const char*) {}

// The message of a failed result: the server's primary message when there is
// one, else libpq's text, else the connection's last error.
std::string result_message(const PGresult* res, const PGconn* conn) {
  if (res) {
    if (const char* primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY)) {
      return fold_lines(primary);
    }
    const char* msg = PQresultErrorMessage(res);
    if (msg && *msg) return fold_lines(msg);
  }
  return pg::error_message(conn);
}

// Error for a statement the server would not prepare, raised by connect().
Error prepare_error(const PGresult* res, const PGconn* conn, Protocol protocol) {
  const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string message = result_message(res, conn);
  if (!state || PQstatus(conn) == CONNECTION_BAD) {
    return Error(ErrorKind::postgres, fmt::format("cannot prepare SQL: {}", message));
  }
  if (message.find("multiple commands") != std::string::npos) {
    return Error(ErrorKind::usage,
                 fmt::format("cannot prepare SQL: the {} protocol cannot run several statements "
                             "in one string (use -M simple): {}",
                             protocol_name(protocol), message),
                 0, state);
  }
  return Error(ErrorKind::usage, fmt::format("cannot prepare SQL: {}", message), 0, state);
}

// Prepares `sql` as `name` on `conn`; throws prepare_error on failure.
void prepare(PGconn* conn, const char* name, const std::string& sql, Protocol protocol) {
  pg::Result res(PQprepare(conn, name, sql.c_str(), 0, nullptr));
  if (!res || PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
    throw prepare_error(res.get(), conn, protocol);
  }
}

// Checks once, before the run, that the extended protocol can run `sql`
// without parameters: parse it as the unnamed statement and describe it.
void check_sql(PGconn* conn, const std::string& sql, Protocol protocol) {
  prepare(conn, "", sql, protocol);
  pg::Result desc(PQdescribePrepared(conn, ""));
  if (!desc || PQresultStatus(desc.get()) != PGRES_COMMAND_OK) {
    throw prepare_error(desc.get(), conn, protocol);
  }
  if (int n = PQnparams(desc.get()); n > 0) {
    throw Error(ErrorKind::usage,
                fmt::format("cannot prepare SQL: it has {} parameter(s) ($1 …), which the driver "
                            "does not supply",
                            n));
  }
}

// Name of the prepared statement of SQL command `command` of script `script`.
std::string script_statement(std::size_t script, std::size_t command) {
  return fmt::format("stallscope_{}_{}", script, command);
}

// Prepared mode: prepares what each transaction runs on `conn` (the single
// SQL, or every SQL command of every script). Throws prepare_error.
void prepare_statements(PGconn* conn, const DriverOptions& o) {
  if (o.scripts.empty()) {
    prepare(conn, kStatementName, o.sql, o.protocol);
    return;
  }
  for (std::size_t s = 0; s < o.scripts.size(); ++s) {
    const auto& cmds = o.scripts[s].commands;
    for (std::size_t k = 0; k < cmds.size(); ++k) {
      if (cmds[k].kind != ScriptCommand::Kind::sql) continue;
      try {
        prepare(conn, script_statement(s, k).c_str(), cmds[k].numbered, o.protocol);
      } catch (const Error& e) {
        throw Error(e.kind(), fmt::format("{}:{}: {}", o.scripts[s].name, cmds[k].line, e.what()),
                    0, e.sqlstate());
      }
    }
  }
}

// The value of :scale: -s if given; for pgbench's built-in scripts the
// number of pgbench_branches rows (as pgbench finds it); else 1.
std::int64_t script_scale(PGconn* conn, const DriverOptions& o) {
  if (o.scale) return *o.scale;
  bool builtin = std::any_of(o.scripts.begin(), o.scripts.end(),
                             [](const Script& s) { return s.name.starts_with("builtin: "); });
  if (!builtin) return 1;
  pg::Result res(PQexec(conn, "SELECT count(*) FROM pgbench_branches"));
  if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    throw_usage(
        fmt::format("cannot run a built-in script: {} (create the tables with "
                    "'pgbench -i' first)",
                    result_message(res.get(), conn)));
  }
  std::int64_t n = std::strtoll(PQgetvalue(res.get(), 0, 0), nullptr, 10);
  if (n < 1) throw_usage("cannot run a built-in script: pgbench_branches is empty");
  return n;
}

}  // namespace

// Per-thread figures: written by the driver thread only, read by
// take_interval_stats() and summary() from any thread.
struct alignas(64) ThreadStats {
  common::SharedLatencyHistogram latency;
  std::atomic<std::int64_t> errors{0};
  std::atomic<std::int64_t> first_send_mono_ns{0};  // 0 = nothing sent yet
  std::atomic<std::int64_t> last_done_mono_ns{0};
  // -R: schedule lag of the transactions sent; --skip-late, -L, connections.
  std::atomic<std::int64_t> lag_sum_ns{0};
  std::atomic<std::int64_t> lag_count{0};
  std::atomic<std::int64_t> lag_max_ns{0};
  std::atomic<std::int64_t> skipped{0};
  std::atomic<std::int64_t> late{0};
  std::atomic<std::int64_t> connections{0};
};

// Single-writer counter bump (no atomic read-modify-write needed).
inline void bump(std::atomic<std::int64_t>& a, std::int64_t by) noexcept {
  a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

enum class ClientState {
  idle,          // between transactions (only momentarily, or at the end)
  throttling,    // -R: waiting for the scheduled start of its next transaction
  busy,          // a transaction is in flight
  rolling_back,  // a ROLLBACK after a failed transaction left the session aborted
  resetting,     // PQresetStart/PQresetPoll in progress
  backoff,       // waiting before the next reset attempt
  sleeping,      // script \sleep until sleep_until_mono_ns
  done,
};

struct Client {
  int client_id = 0;
  int thread = 0;
  pg::Conn conn;
  int connection = 0;              // number of the current connection (client rows)
  std::optional<int> backend_pid;  // of the current connection
  ClientState state = ClientState::idle;
  std::int64_t next_seq = 0;
  // -R: the scheduled start of the next transaction, once drawn.
  std::optional<std::int64_t> scheduled_mono_ns;
  std::optional<std::int64_t> lag_ns;  // of the transaction in flight
  int connect_failures = 0;            // -C: consecutive failed connects
  // Scripts: the one running, its next command, the variables' values.
  std::size_t script = 0;
  std::size_t command = 0;
  std::vector<std::optional<std::int64_t>> values;
  std::int64_t sleep_until_mono_ns = 0;
  std::string query_text;               // simple protocol: SQL with values in place
  std::vector<std::string> param_text;  // extended/prepared: $n values
  std::vector<const char*> param_ptrs;
  // The transaction in flight.
  std::int64_t sent_wall_ns = 0;
  std::int64_t sent_mono_ns = 0;
  std::int64_t rows = 0;
  bool failed = false;
  bool in_copy_out = false;
  bool cancel_sent = false;
  bool needs_rollback = false;
  std::optional<std::string> sqlstate;
  std::optional<std::string> error;
  // Reconnecting.
  int reset_attempts = 0;
  std::int64_t retry_at_mono_ns = 0;
  std::int64_t reset_started_mono_ns = 0;
  short reset_events = 0;
  // The socket registered with the thread's epoll instance (-1: none) and
  // its events. Unregistered before libpq may close or replace the socket
  // (reset, -C, finish), as a new socket may get the same number.
  int watched_fd = -1;
  std::uint32_t watched_events = 0;
  // --pipeline: transactions sent and not yet completed, oldest first.
  struct InFlight {
    std::int64_t sent_wall_ns = 0, sent_mono_ns = 0, rows = 0;
    bool failed = false;
    std::optional<std::string> sqlstate, error;
  };
  std::deque<InFlight> inflight;
  std::int64_t sent_count = 0;  // --pipeline: transactions sent (for -t)
  // -r: the SQL command in flight was sent at this time; rows of the
  // transaction's commands so far (delivered with its query row).
  std::int64_t statement_sent_mono_ns = 0;
  std::vector<schema::StatementLatencyRow> statement_rows;
};

// Serves a fixed set of clients on one thread, closed loop.
class Worker {
 public:
  Worker(const DriverOptions& options, const Sink& sink, ThreadStats& stats,
         std::vector<Client*> clients, std::optional<std::int64_t> deadline_mono_ns,
         const std::atomic<bool>& abort, int threads)
      : threads_(threads),
        options_(options),
        sink_(sink),
        stats_(stats),
        clients_(std::move(clients)),
        deadline_mono_ns_(deadline_mono_ns),
        abort_(abort) {}

  void run();

 private:
  bool should_stop(std::int64_t now_ns) const {
    return stop_requested() || abort_.load(std::memory_order_relaxed) ||
           (deadline_mono_ns_ && now_ns >= *deadline_mono_ns_);
  }
  void send_next(Client& c, std::int64_t now_ns);
  void send_transaction(Client& c);
  void on_readable(Client& c);
  void drain(Client& c, bool connection_lost);
  void take_result(Client& c, const PGresult* res);
  void transaction_done(Client& c, std::int64_t now_ns);
  void record(Client& c, std::int64_t done_mono_ns);
  void begin_reset(Client& c, std::int64_t now_ns);
  void start_reset_attempt(Client& c, std::int64_t now_ns);
  void continue_reset(Client& c);
  void reset_attempt_failed(Client& c, std::int64_t now_ns);
  void advance_timers(std::int64_t now_ns);
  void advance_stop(std::int64_t now_ns);
  void finish(Client& c);
  void flush(std::int64_t now_ns);
  bool connect_for_transaction(Client& c);
  void start_script(Client& c);
  void step_script(Client& c);
  void script_failed(Client& c, const std::string& message);
  void send_failed(Client& c);  // a PQsend* call failed: record, reconnect
  void record_skipped(Client& c, std::int64_t scheduled_mono_ns, std::int64_t now_ns);
  // Fills c.query_text (simple) or c.param_text/param_ptrs for SQL command
  // `cmd`; on an unset variable fails the transaction and returns false.
  std::optional<std::string> bind_command(Client& c, const Script& script,
                                          const ScriptCommand& cmd);
  void pick_script(Client& c);
  void record_entry(Client& c, Client::InFlight&& f, std::int64_t now_ns);
  int send_command(Client& c, const ScriptCommand& cmd, std::size_t script, std::size_t command);
  // --pipeline
  void pipeline_fill(Client& c, std::int64_t now_ns);
  bool pipeline_send_one(Client& c);
  void pipeline_drain(Client& c);
  void pipeline_complete(Client& c, std::int64_t now_ns);
  void pipeline_lost(Client& c, std::int64_t now_ns);
  void sample_tcp(std::int64_t now_ns);
  void statement_done(Client& c, std::int64_t now_ns);
  // Registers client `index`'s socket `fd` for `events` (0: none) with the
  // epoll instance, with a system call only when that changes; false when
  // the socket cannot be registered (closed under libpq).
  bool watch(Client& c, std::size_t index, int fd, std::uint32_t events);
  void unwatch(Client& c);
  void close_connection(Client& c);  // unwatch, then close the socket
  void dispatch(Client& c);          // its socket is ready (or cannot be watched)

 public:
  // -r: per statement id, latency sum and executions (read after run()).
  std::vector<std::int64_t> statement_sum_ns;
  std::vector<std::int64_t> statement_count;

 private:
  int threads_;  // threads of the driver (-R shares the rate among them)
  const DriverOptions& options_;
  const Sink& sink_;
  ThreadStats& stats_;
  std::vector<Client*> clients_;
  std::optional<std::int64_t> deadline_mono_ns_;
  const std::atomic<bool>& abort_;

  int active_ = 0;
  bool stopping_ = false;
  std::int64_t stop_mono_ns_ = 0;
  std::int64_t last_flush_mono_ns_ = 0;
  std::size_t reserve_rows_ = 256;
  schema::Batch pending_;
  // -R: this thread's Poisson schedule (as pgbench's throttle_trigger).
  std::int64_t trigger_mono_ns_ = 0;
  std::mt19937_64 rng_{std::random_device{}()};
  std::exponential_distribution<double> next_gap_{1.0};
  // -r: statement id of command k of script s (SQL commands only, else -1).
  std::vector<std::vector<int>> statement_ids_;
  std::int64_t next_tcp_mono_ns_ = 0;
  // The sockets of this thread's clients with a reply to wait for. epoll,
  // not poll: the registrations stay from one wait to the next (a client
  // that sends its next query stays registered), so a wait costs no per-socket
  // wait-queue set-up and tear-down (≈ 0.2 µs instead of 0.6 µs a wait for
  // 4 sockets).
  Epoll epoll_;
};

// Statement ids of the scripts' SQL commands, numbered in script order.
std::vector<std::vector<int>> number_statements(const std::vector<Script>& scripts) {
  std::vector<std::vector<int>> ids;
  int next = 0;
  for (const auto& s : scripts) {
    auto& v = ids.emplace_back();
    for (const auto& c : s.commands) v.push_back(c.kind == ScriptCommand::Kind::sql ? next++ : -1);
  }
  return ids;
}

void Worker::run() {
  std::int64_t now = mono_now_ns();
  last_flush_mono_ns_ = now;
  pending_.queries.reserve(reserve_rows_);
  active_ = static_cast<int>(clients_.size());
  trigger_mono_ns_ = now;
  next_tcp_mono_ns_ = now;
  if (options_.per_statement) {
    statement_ids_ = number_statements(options_.scripts);
    int n = 0;
    for (const auto& v : statement_ids_)
      n += static_cast<int>(std::count_if(v.begin(), v.end(), [](int id) { return id >= 0; }));
    statement_sum_ns.assign(static_cast<std::size_t>(n), 0);
    statement_count.assign(static_cast<std::size_t>(n), 0);
  }
  if (options_.rate_tps) {
    // Mean gap between this thread's transactions, ns (pgbench: the rate is
    // shared equally among the threads).
    std::int64_t threads = threads_;
    next_gap_ = std::exponential_distribution<double>(*options_.rate_tps / 1e9 /
                                                      static_cast<double>(threads));
  }
  for (Client* c : clients_) send_next(*c, now);

  std::vector<epoll_event> events(std::max<std::size_t>(clients_.size(), 1));
  std::vector<Client*> unwatchable;  // ready at once: their socket cannot be registered
  while (active_ > 0) {
    now = mono_now_ns();
    if (!stopping_ && should_stop(now)) {
      stopping_ = true;
      stop_mono_ns_ = now;
      if (options_.tcp_info_period_ns > 0) sample_tcp(now);  // the last second's too
    }
    if (stopping_) advance_stop(now);
    advance_timers(now);
    if (options_.tcp_info_period_ns > 0 && now >= next_tcp_mono_ns_) {
      sample_tcp(now);
      next_tcp_mono_ns_ = now + options_.tcp_info_period_ns;
    }
    if (now - last_flush_mono_ns_ >= kFlushIntervalNs) flush(now);
    if (active_ == 0) break;

    std::int64_t wake_ns = std::min(now + kPollSliceNs, last_flush_mono_ns_ + kFlushIntervalNs);
    if (options_.tcp_info_period_ns > 0) wake_ns = std::min(wake_ns, next_tcp_mono_ns_);
    if (deadline_mono_ns_ && !stopping_) wake_ns = std::min(wake_ns, *deadline_mono_ns_);
    unwatchable.clear();
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      Client* c = clients_[i];
      const int fd = c->conn ? PQsocket(c->conn.get()) : -1;
      std::uint32_t want = 0;
      switch (c->state) {
        case ClientState::busy:
        case ClientState::rolling_back:
          want = EPOLLIN;
          break;
        case ClientState::resetting:
          want = c->reset_events == POLLIN ? EPOLLIN : EPOLLOUT;
          wake_ns = std::min(wake_ns, c->reset_started_mono_ns + kResetAttemptTimeoutNs);
          break;
        case ClientState::backoff:
          wake_ns = std::min(wake_ns, c->retry_at_mono_ns);
          break;
        case ClientState::throttling:
          wake_ns = std::min(wake_ns, *c->scheduled_mono_ns);
          break;
        case ClientState::sleeping:
          wake_ns = std::min(wake_ns, c->sleep_until_mono_ns);
          break;
        case ClientState::idle:
        case ClientState::done:
          break;
      }
      if (!watch(*c, i, fd, want)) unwatchable.push_back(c);
    }
    if (stopping_) wake_ns = std::min(wake_ns, now + 10'000'000);
    int timeout_ms = wake_ns <= now ? 0 : static_cast<int>((wake_ns - now + 999'999) / 1'000'000);
    if (!unwatchable.empty()) timeout_ms = 0;
    int n = epoll_wait(epoll_.fd(), events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::runtime, fmt::format("cannot wait for the driver's connections: {}",
                                                  std::strerror(errno)));
    }
    for (int i = 0; i < n; ++i) dispatch(*clients_[events[static_cast<std::size_t>(i)].data.u32]);
    // A socket libpq no longer has (e.g. closed after a failure): the
    // handler finds out what happened, as after poll()'s POLLNVAL.
    for (Client* c : unwatchable) dispatch(*c);
  }
  flush(mono_now_ns());
}

void Worker::dispatch(Client& c) {
  if (c.state == ClientState::resetting) {
    continue_reset(c);
  } else if (options_.pipeline > 0 && c.state == ClientState::busy) {
    pipeline_drain(c);
  } else if (c.state == ClientState::busy || c.state == ClientState::rolling_back) {
    on_readable(c);
  }
}

bool Worker::watch(Client& c, std::size_t index, int fd, std::uint32_t events) {
  if (c.watched_fd >= 0 && c.watched_fd != fd) {
    // libpq closed the socket it had (a lost connection), which took it out
    // of the epoll set; its number may already be another client's socket,
    // so it is not touched.
    c.watched_fd = -1;
    c.watched_events = 0;
  }
  if (fd < 0) return events == 0;
  if (events == c.watched_events && (events == 0 || fd == c.watched_fd)) return true;
  epoll_event e{.events = events, .data = {.u32 = static_cast<std::uint32_t>(index)}};
  if (events == 0) {
    // Nothing to wait for (throttled, sleeping, backoff): out of the set,
    // as epoll reports a hang-up even with no events asked for, and a
    // server closing the connection must not wake every wait.
    epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, fd, nullptr);
    c.watched_fd = -1;
    c.watched_events = 0;
    return true;
  }
  int op = fd == c.watched_fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  if (epoll_ctl(epoll_.fd(), op, fd, &e) != 0) {
    // EEXIST: still registered; ENOENT: gone. The other operation applies.
    op = op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(epoll_.fd(), op, fd, &e) != 0) {
      c.watched_fd = -1;
      c.watched_events = 0;
      return false;
    }
  }
  c.watched_fd = fd;
  c.watched_events = events;
  return true;
}

void Worker::unwatch(Client& c) {
  // Only while the socket is still the connection's own (see watch()).
  if (c.watched_fd >= 0 && c.conn && PQsocket(c.conn.get()) == c.watched_fd) {
    epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, c.watched_fd, nullptr);
  }
  c.watched_fd = -1;
  c.watched_events = 0;
}

void Worker::close_connection(Client& c) {
  unwatch(c);
  c.conn.reset();
}

// Closed loop: sends the client's next transaction now, or finishes the
// client when the run is over for it.
void Worker::send_next(Client& c, std::int64_t now_ns) {
  if (options_.pipeline > 0) {
    pipeline_fill(c, now_ns);
    return;
  }
  if (stopping_ || (deadline_mono_ns_ && now_ns >= *deadline_mono_ns_) ||
      (options_.queries_per_client && c.next_seq >= *options_.queries_per_client)) {
    finish(c);
    return;
  }
  if (c.needs_rollback) {
    c.needs_rollback = false;
    if (PQsendQuery(c.conn.get(), "ROLLBACK")) {
      c.state = ClientState::rolling_back;
    } else {
      begin_reset(c, now_ns);
    }
    return;
  }
  if (options_.rate_tps) {
    for (;;) {
      if (!c.scheduled_mono_ns) {
        trigger_mono_ns_ += static_cast<std::int64_t>(next_gap_(rng_));
        c.scheduled_mono_ns = trigger_mono_ns_;
      }
      std::int64_t sched = *c.scheduled_mono_ns;
      if (deadline_mono_ns_ && sched >= *deadline_mono_ns_) {
        finish(c);  // scheduled after the end of the run: never due
        return;
      }
      if (sched > now_ns) {
        c.state = ClientState::throttling;
        return;
      }
      if (options_.skip_late && options_.latency_limit_ms &&
          static_cast<double>(now_ns - sched) > *options_.latency_limit_ms * 1e6) {
        c.scheduled_mono_ns.reset();
        record_skipped(c, sched, now_ns);
        if (options_.queries_per_client && c.next_seq >= *options_.queries_per_client) {
          finish(c);
          return;
        }
        continue;
      }
      break;
    }
  }
  send_transaction(c);
}

void Worker::record_skipped(Client& c, std::int64_t scheduled_mono_ns, std::int64_t now_ns) {
  bump(stats_.skipped, 1);
  std::int64_t lag_ns = now_ns - scheduled_mono_ns;
  pending_.query_skips.push_back(schema::QuerySkippedRow{
      .client_id = c.client_id,
      .seq = c.next_seq++,
      .start_ns = wall_now_ns() - lag_ns,
      .lag_ns = lag_ns,
  });
  if (pending_.query_skips.size() >= kFlushRows) flush(now_ns);
}

// -C: opens the client's connection for the next transaction (blocking, as
// pgbench -C does). On failure records a failed transaction and backs off;
// returns whether the transaction can be sent.
bool Worker::connect_for_transaction(Client& c) {
  std::string application_name = fmt::format("stallscope/{}", c.client_id);
  std::int64_t begin_ns = mono_now_ns();
  try {
    c.conn = pg::connect(options_.conninfo, application_name);
    PQsetNoticeProcessor(c.conn.get(), discard_notice, nullptr);
    if (options_.protocol == Protocol::prepared) prepare_statements(c.conn.get(), options_);
  } catch (const Error& e) {
    close_connection(c);
    c.backend_pid.reset();
    c.failed = true;
    c.sqlstate = e.sqlstate().empty() ? kConnectionFailure : e.sqlstate();
    c.error = e.what();
    std::int64_t now = mono_now_ns();
    record(c, now);
    ++c.connect_failures;
    if (stopping_ || c.connect_failures >= kMaxResetAttempts) {
      finish(c);
    } else {
      c.state = ClientState::backoff;
      c.retry_at_mono_ns = now + (kFirstBackoffNs << (c.connect_failures - 1));
    }
    return false;
  }
  std::int64_t now = mono_now_ns();
  c.connect_failures = 0;
  c.backend_pid = PQbackendPID(c.conn.get());
  bump(stats_.connections, 1);
  pending_.clients.push_back(schema::ClientRow{
      .client_id = c.client_id,
      .connection = ++c.connection,
      .thread = c.thread,
      .backend_pid = c.backend_pid,
      .connect_ns = wall_now_ns(),
      .connect_latency_ns = now - begin_ns,
      .application_name = std::move(application_name),
  });
  return true;
}

void Worker::send_transaction(Client& c) {
  c.rows = 0;
  c.failed = false;
  c.in_copy_out = false;
  c.cancel_sent = false;
  c.sqlstate.reset();
  c.error.reset();
  c.sent_wall_ns = wall_now_ns();
  c.sent_mono_ns = mono_now_ns();
  c.lag_ns.reset();
  if (c.scheduled_mono_ns) {
    // -R: the transaction counts from its scheduled start.
    std::int64_t lag = std::max<std::int64_t>(0, c.sent_mono_ns - *c.scheduled_mono_ns);
    c.lag_ns = lag;
    c.sent_mono_ns -= lag;
    c.sent_wall_ns -= lag;
    c.scheduled_mono_ns.reset();
    bump(stats_.lag_sum_ns, lag);
    bump(stats_.lag_count, 1);
    if (lag > stats_.lag_max_ns.load(std::memory_order_relaxed)) {
      stats_.lag_max_ns.store(lag, std::memory_order_relaxed);
    }
  }
  if (stats_.first_send_mono_ns.load(std::memory_order_relaxed) == 0) {
    stats_.first_send_mono_ns.store(c.sent_mono_ns, std::memory_order_relaxed);
  }
  if (options_.connect_per_transaction && !c.conn && !connect_for_transaction(c)) return;
  if (!options_.scripts.empty()) {
    start_script(c);
    return;
  }
  PGconn* conn = c.conn.get();
  int sent = 0;
  switch (options_.protocol) {
    case Protocol::simple:
      sent = PQsendQuery(conn, options_.sql.c_str());
      break;
    case Protocol::extended:
      sent =
          PQsendQueryParams(conn, options_.sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0);
      break;
    case Protocol::prepared:
      sent = PQsendQueryPrepared(conn, kStatementName, 0, nullptr, nullptr, nullptr, 0);
      break;
  }
  if (sent) {
    c.state = ClientState::busy;
    return;
  }
  send_failed(c);
}

// Could not even send: the connection is gone (or libpq is out of memory).
// Record the attempt and reconnect either way.
void Worker::send_failed(Client& c) {
  PGconn* conn = c.conn.get();
  c.failed = true;
  c.sqlstate = PQstatus(conn) == CONNECTION_BAD ? kConnectionFailure : kInternalError;
  c.error = pg::error_message(conn);
  std::int64_t now = mono_now_ns();
  record(c, now);
  begin_reset(c, now);
}

void Worker::start_script(Client& c) {
  pick_script(c);
  c.command = 0;
  c.statement_rows.clear();
  c.state = ClientState::busy;
  step_script(c);
}

// Chooses the next transaction's script by weight; sets up the variables.
void Worker::pick_script(Client& c) {
  if (options_.scripts.size() == 1) {
    c.script = 0;
  } else {
    std::int64_t total = 0;
    for (const auto& s : options_.scripts) total += s.weight;
    std::int64_t pick = std::uniform_int_distribution<std::int64_t>(0, total - 1)(rng_);
    for (c.script = 0; c.script + 1 < options_.scripts.size(); ++c.script) {
      pick -= options_.scripts[c.script].weight;
      if (pick < 0) break;
    }
  }
  if (c.values.empty()) {
    c.values.resize(options_.variables.names.size());
    if (auto scale = options_.variables.find("scale"))
      c.values[*scale] = options_.scale.value_or(1);
    for (const auto& [name, value] : options_.defines) {
      if (auto slot = options_.variables.find(name)) c.values[*slot] = value;
    }
  }
}

// --pipeline: sends transactions until N are in flight or the run is over
// for this client; finishes the client when nothing is left in flight.
void Worker::pipeline_fill(Client& c, std::int64_t now_ns) {
  if (c.state == ClientState::done) return;
  bool sent = false;
  while (static_cast<int>(c.inflight.size()) < options_.pipeline && !stopping_ &&
         !(deadline_mono_ns_ && now_ns >= *deadline_mono_ns_) &&
         !(options_.queries_per_client && c.sent_count >= *options_.queries_per_client)) {
    if (!pipeline_send_one(c)) {
      pipeline_lost(c, mono_now_ns());
      return;
    }
    ++c.sent_count;
    sent = true;
  }
  // libpq buffers pipelined messages until a threshold: send them now.
  if (sent && PQflush(c.conn.get()) < 0) {
    pipeline_lost(c, mono_now_ns());
    return;
  }
  if (c.inflight.empty()) {
    finish(c);
    return;
  }
  c.state = ClientState::busy;
}

// Sends one transaction and its Sync; false when the connection failed. A
// transaction whose script cannot be bound is recorded as failed, unsent.
bool Worker::pipeline_send_one(Client& c) {
  Client::InFlight f;
  f.sent_wall_ns = wall_now_ns();
  f.sent_mono_ns = mono_now_ns();
  if (stats_.first_send_mono_ns.load(std::memory_order_relaxed) == 0) {
    stats_.first_send_mono_ns.store(f.sent_mono_ns, std::memory_order_relaxed);
  }
  PGconn* conn = c.conn.get();
  int sent = 0;
  if (options_.scripts.empty()) {
    switch (options_.protocol) {
      case Protocol::simple:  // the simple protocol cannot be pipelined: the text as is
      case Protocol::extended:
        sent =
            PQsendQueryParams(conn, options_.sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0);
        break;
      case Protocol::prepared:
        sent = PQsendQueryPrepared(conn, kStatementName, 0, nullptr, nullptr, nullptr, 0);
        break;
    }
  } else {
    pick_script(c);
    const Script& script = options_.scripts[c.script];
    std::optional<std::string> error;
    std::size_t sql_command = 0;
    for (std::size_t k = 0; k < script.commands.size() && !error; ++k) {
      const ScriptCommand& cmd = script.commands[k];
      if (cmd.kind == ScriptCommand::Kind::set) {
        try {
          c.values[static_cast<std::size_t>(cmd.target)] = evaluate(*cmd.expr, c.values, rng_);
        } catch (const Error& e) {
          error = fmt::format("{}:{}: {}", script.name, cmd.line, e.what());
        }
      } else if (cmd.kind == ScriptCommand::Kind::sql) {
        sql_command = k;
        error = bind_command(c, script, cmd);
      }
    }
    if (error) {
      f.failed = true;
      f.sqlstate = kInternalError;
      f.error = std::move(error);
      record_entry(c, std::move(f), mono_now_ns());
      return true;
    }
    if (options_.protocol == Protocol::simple) {  // values in place, unnamed statement
      sent =
          PQsendQueryParams(conn, c.query_text.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0);
    } else {
      sent = send_command(c, script.commands[sql_command], c.script, sql_command);
    }
  }
  if (sent && PQpipelineSync(conn)) {
    c.inflight.push_back(std::move(f));
    return true;
  }
  if (PQstatus(conn) == CONNECTION_BAD) return false;
  // Refused by libpq with the connection fine (e.g. out of memory).
  f.failed = true;
  f.sqlstate = kInternalError;
  f.error = pg::error_message(conn);
  record_entry(c, std::move(f), mono_now_ns());
  return true;
}

// --pipeline: takes every result that arrived; a Sync result completes the
// oldest transaction in flight; then refills the pipeline.
void Worker::pipeline_drain(Client& c) {
  PGconn* conn = c.conn.get();
  if (PQconsumeInput(conn) == 0 && PQstatus(conn) == CONNECTION_BAD) {
    pipeline_lost(c, mono_now_ns());
    return;
  }
  int nulls = 0;  // two NULLs in a row: nothing more to read now
  while (!c.inflight.empty() && !PQisBusy(conn)) {
    pg::Result res(PQgetResult(conn));
    if (!res) {
      if (++nulls > 1) break;
      continue;
    }
    nulls = 0;
    Client::InFlight& f = c.inflight.front();
    switch (PQresultStatus(res.get())) {
      case PGRES_PIPELINE_SYNC:
        pipeline_complete(c, mono_now_ns());
        break;
      case PGRES_TUPLES_OK:
      case PGRES_SINGLE_TUPLE:
        f.rows += PQntuples(res.get());
        break;
      case PGRES_COMMAND_OK: {
        const char* affected = PQcmdTuples(res.get());
        if (affected && *affected) f.rows += std::strtoll(affected, nullptr, 10);
        break;
      }
      case PGRES_EMPTY_QUERY:
        break;
      default:  // FATAL_ERROR, PIPELINE_ABORTED, COPY_*, …
        if (!f.failed) {
          f.failed = true;
          const char* state = PQresultErrorField(res.get(), PG_DIAG_SQLSTATE);
          f.sqlstate = state && *state                    ? std::string(state)
                       : PQstatus(conn) == CONNECTION_BAD ? std::string(kConnectionFailure)
                                                          : std::string(kInternalError);
          f.error = PQresultStatus(res.get()) == PGRES_PIPELINE_ABORTED
                        ? std::string("pipeline aborted by an earlier failure")
                        : result_message(res.get(), conn);
        }
        break;
    }
  }
  if (PQstatus(conn) == CONNECTION_BAD) {
    pipeline_lost(c, mono_now_ns());
    return;
  }
  pipeline_fill(c, mono_now_ns());
}

void Worker::pipeline_complete(Client& c, std::int64_t now_ns) {
  Client::InFlight f = std::move(c.inflight.front());
  c.inflight.pop_front();
  record_entry(c, std::move(f), now_ns);
}

void Worker::record_entry(Client& c, Client::InFlight&& f, std::int64_t now_ns) {
  c.sent_wall_ns = f.sent_wall_ns;
  c.sent_mono_ns = f.sent_mono_ns;
  c.rows = f.rows;
  c.failed = f.failed;
  c.sqlstate = std::move(f.sqlstate);
  c.error = std::move(f.error);
  c.lag_ns.reset();
  record(c, now_ns);
}

// --pipeline: the connection broke: every transaction in flight failed.
void Worker::pipeline_lost(Client& c, std::int64_t now_ns) {
  std::string message = pg::error_message(c.conn.get());
  while (!c.inflight.empty()) {
    Client::InFlight f = std::move(c.inflight.front());
    c.inflight.pop_front();
    if (!f.failed) {
      f.failed = true;
      f.sqlstate = kConnectionFailure;
      f.error = message;
    }
    record_entry(c, std::move(f), now_ns);
  }
  begin_reset(c, now_ns);
}

// TCP_INFO of each connected TCP socket of this thread (unix sockets: none).
void Worker::sample_tcp(std::int64_t) {
  std::int64_t wall_ns = 0;
  for (Client* c : clients_) {
    if (!c->conn || c->state == ClientState::done || c->state == ClientState::resetting ||
        c->state == ClientState::backoff) {
      continue;
    }
    int fd = PQsocket(c->conn.get());
    if (fd < 0) continue;
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0 ||
        (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)) {
      continue;
    }
    tcp_info info{};
    socklen_t info_len = sizeof info;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_len) != 0) continue;
    if (wall_ns == 0) wall_ns = wall_now_ns();
    pending_.tcp_samples.push_back(schema::TcpSampleRow{
        .time_ns = wall_ns,
        .client_id = c->client_id,
        .connection = c->connection,
        .rtt_ns = static_cast<std::int64_t>(info.tcpi_rtt) * 1000,
        .rttvar_ns = static_cast<std::int64_t>(info.tcpi_rttvar) * 1000,
        .total_retrans = static_cast<std::int64_t>(info.tcpi_total_retrans),
        .unacked = static_cast<std::int64_t>(info.tcpi_unacked),
    });
  }
}

// Runs the script's commands from c.command: \set at once, \sleep by
// waiting, SQL by sending it (the next step follows its results). At the end
// of the script the transaction is done.
void Worker::step_script(Client& c) {
  const Script& script = options_.scripts[c.script];
  while (c.command < script.commands.size()) {
    const ScriptCommand& cmd = script.commands[c.command];
    if (cmd.kind == ScriptCommand::Kind::set || cmd.kind == ScriptCommand::Kind::sleep) {
      std::int64_t v = 0;
      try {
        v = evaluate(*cmd.expr, c.values, rng_);
      } catch (const Error& e) {
        script_failed(c, fmt::format("{}:{}: {}", script.name, cmd.line, e.what()));
        return;
      }
      ++c.command;
      if (cmd.kind == ScriptCommand::Kind::set) {
        c.values[static_cast<std::size_t>(cmd.target)] = v;
        continue;
      }
      c.sleep_until_mono_ns = mono_now_ns() + std::max<std::int64_t>(0, v) * cmd.unit_ns;
      c.state = ClientState::sleeping;
      return;
    }
    if (auto error = bind_command(c, script, cmd)) {
      script_failed(c, *error);
      return;
    }
    if (options_.per_statement) c.statement_sent_mono_ns = mono_now_ns();
    if (send_command(c, cmd, c.script, c.command)) {
      c.state = ClientState::busy;
      return;
    }
    send_failed(c);
    return;
  }
  std::int64_t now = mono_now_ns();
  record(c, now);
  c.state = ClientState::idle;
  if (options_.connect_per_transaction) close_connection(c);
  send_next(c, now);
}

// Returns the message of a transaction that cannot go on, else nullopt.
std::optional<std::string> Worker::bind_command(Client& c, const Script& script,
                                                const ScriptCommand& cmd) {
  c.param_text.clear();
  for (int var : cmd.vars) {
    const auto& v = c.values[static_cast<std::size_t>(var)];
    if (!v) {
      return fmt::format("{}:{}: variable '{}' is not set", script.name, cmd.line,
                         options_.variables.names[static_cast<std::size_t>(var)]);
    }
    c.param_text.push_back(std::to_string(*v));
  }
  if (options_.protocol == Protocol::simple) {
    c.query_text.clear();
    for (std::size_t k = 0; k < cmd.text.size(); ++k) {
      c.query_text += cmd.text[k];
      if (k < c.param_text.size()) c.query_text += c.param_text[k];
    }
  } else {
    c.param_ptrs.clear();
    for (const auto& p : c.param_text) c.param_ptrs.push_back(p.c_str());
  }
  return std::nullopt;
}

// Sends SQL command `command` of script `script`, bound by bind_command.
int Worker::send_command(Client& c, const ScriptCommand& cmd, std::size_t script,
                         std::size_t command) {
  PGconn* conn = c.conn.get();
  if (options_.protocol == Protocol::simple) return PQsendQuery(conn, c.query_text.c_str());
  int n = static_cast<int>(c.param_ptrs.size());
  if (options_.protocol == Protocol::extended) {
    return PQsendQueryParams(conn, cmd.numbered.c_str(), n, nullptr, c.param_ptrs.data(), nullptr,
                             nullptr, 0);
  }
  return PQsendQueryPrepared(conn, script_statement(script, command).c_str(), n,
                             c.param_ptrs.data(), nullptr, nullptr, 0);
}

// -r: the SQL command c.command of the running script got its last result.
void Worker::statement_done(Client& c, std::int64_t now_ns) {
  int id = statement_ids_[c.script][c.command];
  if (id < 0) return;
  std::int64_t latency_ns = now_ns - c.statement_sent_mono_ns;
  c.statement_rows.push_back(schema::StatementLatencyRow{
      .start_ns = c.sent_wall_ns,
      .client_id = c.client_id,
      .seq = c.next_seq,
      .statement = id,
      .latency_ns = latency_ns,
  });
}

// A script that cannot go on (an expression error): the transaction fails
// with XX000 and the message naming the script line; the next one starts.
void Worker::script_failed(Client& c, const std::string& message) {
  c.failed = true;
  c.sqlstate = kInternalError;
  c.error = message;
  std::int64_t now = mono_now_ns();
  record(c, now);
  c.state = ClientState::idle;
  if (options_.connect_per_transaction) close_connection(c);
  send_next(c, now);
}

void Worker::on_readable(Client& c) {
  bool lost = PQconsumeInput(c.conn.get()) == 0 && PQstatus(c.conn.get()) == CONNECTION_BAD;
  drain(c, lost);
}

// Takes every result libpq can deliver without blocking; on the final NULL
// the transaction is done. With `connection_lost`, PQgetResult cannot block
// (libpq fails at once on a dropped socket), so it is called regardless of
// PQisBusy until the NULL.
void Worker::drain(Client& c, bool connection_lost) {
  PGconn* conn = c.conn.get();
  for (;;) {
    if (c.in_copy_out) {
      for (;;) {
        char* buf = nullptr;
        int n = PQgetCopyData(conn, &buf, 1);
        if (n > 0) {
          PQfreemem(buf);
          ++c.rows;
          continue;
        }
        if (n == 0 && !connection_lost) return;  // wait for more
        break;                                   // -1: COPY done, -2: error
      }
      c.in_copy_out = false;
    }
    if (!connection_lost && PQisBusy(conn)) return;
    pg::Result res(PQgetResult(conn));
    if (!res) {
      transaction_done(c, mono_now_ns());
      return;
    }
    take_result(c, res.get());
  }
}

void Worker::take_result(Client& c, const PGresult* res) {
  switch (PQresultStatus(res)) {
    case PGRES_TUPLES_OK:
    case PGRES_SINGLE_TUPLE:
      c.rows += PQntuples(res);
      break;
    case PGRES_COMMAND_OK: {
      const char* affected = PQcmdTuples(const_cast<PGresult*>(res));
      if (affected && *affected) c.rows += std::strtoll(affected, nullptr, 10);
      break;
    }
    case PGRES_COPY_IN:
      // The driver has no data to send: end the COPY with an error so the
      // server reports it and the session goes on.
      PQputCopyEnd(c.conn.get(), "stallscope driver sends no COPY data");
      break;
    case PGRES_COPY_OUT:
      c.in_copy_out = true;  // each data row counts as a row
      break;
    case PGRES_EMPTY_QUERY:
      break;
    default:  // FATAL_ERROR, BAD_RESPONSE, NONFATAL_ERROR, COPY_BOTH, …
      if (!c.failed) {
        c.failed = true;
        const char* state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (state && *state) {
          c.sqlstate = state;
        } else {
          c.sqlstate =
              PQstatus(c.conn.get()) == CONNECTION_BAD ? kConnectionFailure : kInternalError;
        }
        c.error = result_message(res, c.conn.get());
      }
      break;
  }
}

void Worker::transaction_done(Client& c, std::int64_t now_ns) {
  if (options_.per_statement && c.state == ClientState::busy && !options_.scripts.empty() &&
      c.command < options_.scripts[c.script].commands.size()) {
    statement_done(c, now_ns);
  }
  if (c.state == ClientState::busy && !options_.scripts.empty() && !c.failed &&
      PQstatus(c.conn.get()) != CONNECTION_BAD &&
      c.command + 1 < options_.scripts[c.script].commands.size()) {
    ++c.command;  // the script goes on
    step_script(c);
    return;
  }
  if (c.state == ClientState::busy) record(c, now_ns);
  c.state = ClientState::idle;
  PGconn* conn = c.conn.get();
  if (options_.connect_per_transaction) {
    close_connection(c);  // -C: the next transaction connects anew
    c.needs_rollback = false;
    send_next(c, now_ns);
    return;
  }
  if (PQstatus(conn) == CONNECTION_BAD) {
    begin_reset(c, now_ns);
    return;
  }
  if (c.failed && PQtransactionStatus(conn) == PQTRANS_INERROR) c.needs_rollback = true;
  send_next(c, now_ns);
}

void Worker::record(Client& c, std::int64_t done_mono_ns) {
  if (stopping_ && c.cancel_sent && c.failed && c.sqlstate == kQueryCanceled) {
    // Cut short by the driver's own cancel at the end of the run: unfinished,
    // not a failure — dropped (pgbench does not count these either).
    c.sqlstate.reset();
    c.error.reset();
    c.statement_rows.clear();
    return;
  }
  if (options_.per_statement) {
    for (auto& r : c.statement_rows) {
      statement_sum_ns[static_cast<std::size_t>(r.statement)] += r.latency_ns;
      ++statement_count[static_cast<std::size_t>(r.statement)];
      pending_.statement_latencies.push_back(r);
    }
    c.statement_rows.clear();
  }
  std::int64_t latency_ns = done_mono_ns - c.sent_mono_ns;
  // As pgbench: latency statistics and tps count successful transactions;
  // failed ones are counted apart (and stored with their latency).
  if (!c.failed) stats_.latency.record_ns(latency_ns);
  if (options_.latency_limit_ms &&
      static_cast<double>(latency_ns) > *options_.latency_limit_ms * 1e6) {
    bump(stats_.late, 1);
  }
  if (c.failed) {
    stats_.errors.store(stats_.errors.load(std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
  }
  stats_.last_done_mono_ns.store(done_mono_ns, std::memory_order_relaxed);
  const std::int64_t seq = c.next_seq++;
  pending_.queries.push_back(schema::QueryRow{
      .client_id = c.client_id,
      .seq = seq,
      .start_ns = c.sent_wall_ns,
      .latency_ns = latency_ns,
      .rows = c.failed ? std::nullopt : std::optional<std::int64_t>(c.rows),
      .connection = c.backend_pid ? std::optional<int>(c.connection) : std::nullopt,
      .lag_ns = c.lag_ns,
  });
  if (c.sqlstate) {
    pending_.query_errors.push_back(schema::QueryErrorRow{
        .client_id = c.client_id,
        .seq = seq,
        .start_ns = c.sent_wall_ns,
        .sqlstate = std::move(*c.sqlstate),
        .error = std::move(c.error),
    });
  }
  c.sqlstate.reset();
  c.error.reset();
  if (pending_.queries.size() >= kFlushRows) flush(done_mono_ns);
}

void Worker::begin_reset(Client& c, std::int64_t now_ns) {
  if (stopping_) {
    finish(c);
    return;
  }
  c.reset_attempts = 0;
  start_reset_attempt(c, now_ns);
}

void Worker::start_reset_attempt(Client& c, std::int64_t now_ns) {
  ++c.reset_attempts;
  c.reset_started_mono_ns = now_ns;
  unwatch(c);  // the socket is closed and a new one opened, maybe with the same number
  if (!PQresetStart(c.conn.get())) {
    reset_attempt_failed(c, now_ns);
    return;
  }
  c.state = ClientState::resetting;
  c.reset_events = POLLOUT;  // libpq: poll as if PQresetPoll had said WRITING
}

void Worker::continue_reset(Client& c) {
  PGconn* conn = c.conn.get();
  unwatch(c);  // libpq may move to another socket (the next host address)
  switch (PQresetPoll(conn)) {
    case PGRES_POLLING_READING:
      c.reset_events = POLLIN;
      return;
    case PGRES_POLLING_WRITING:
      c.reset_events = POLLOUT;
      return;
    case PGRES_POLLING_OK:
      break;
    default:
      reset_attempt_failed(c, mono_now_ns());
      return;
  }
  if (options_.protocol == Protocol::prepared) {
    try {
      prepare_statements(conn, options_);
    } catch (const Error&) {
      reset_attempt_failed(c, mono_now_ns());
      return;
    }
  }
  if (options_.pipeline > 0 && !PQenterPipelineMode(conn)) {
    reset_attempt_failed(c, mono_now_ns());
    return;
  }
  std::int64_t now = mono_now_ns();
  c.reset_attempts = 0;
  c.needs_rollback = false;
  // A new connection number: the old backend's row (and its pid) stays.
  c.backend_pid = PQbackendPID(conn);
  bump(stats_.connections, 1);
  pending_.clients.push_back(schema::ClientRow{
      .client_id = c.client_id,
      .connection = ++c.connection,
      .thread = c.thread,
      .backend_pid = c.backend_pid,
      .connect_ns = wall_now_ns(),
      .connect_latency_ns = now - c.reset_started_mono_ns,
      .application_name = fmt::format("stallscope/{}", c.client_id),
  });
  c.state = ClientState::idle;
  send_next(c, now);
}

void Worker::reset_attempt_failed(Client& c, std::int64_t now_ns) {
  if (stopping_ || c.reset_attempts >= kMaxResetAttempts) {
    finish(c);
    return;
  }
  c.state = ClientState::backoff;
  c.retry_at_mono_ns = now_ns + (kFirstBackoffNs << (c.reset_attempts - 1));
}

void Worker::advance_timers(std::int64_t now_ns) {
  for (Client* c : clients_) {
    if (c->state == ClientState::backoff && now_ns >= c->retry_at_mono_ns) {
      if (options_.connect_per_transaction) {
        c->state = ClientState::idle;  // -C: the next transaction connects
        send_next(*c, now_ns);
      } else {
        start_reset_attempt(*c, now_ns);
      }
    } else if (c->state == ClientState::throttling && now_ns >= *c->scheduled_mono_ns) {
      c->state = ClientState::idle;
      send_next(*c, now_ns);
    } else if (c->state == ClientState::sleeping && now_ns >= c->sleep_until_mono_ns) {
      c->state = ClientState::busy;
      step_script(*c);
    } else if (c->state == ClientState::resetting &&
               now_ns - c->reset_started_mono_ns >= kResetAttemptTimeoutNs) {
      reset_attempt_failed(*c, now_ns);
    }
  }
}

// The run is over: nothing new is sent; in-flight transactions get
// kStopGraceNs to finish, then a cancel request, then kCancelWaitNs.
void Worker::advance_stop(std::int64_t now_ns) {
  for (Client* c : clients_) {
    switch (c->state) {
      case ClientState::done:
        break;
      case ClientState::busy:
        if (!c->cancel_sent && now_ns - stop_mono_ns_ >= kStopGraceNs) {
          c->cancel_sent = true;
          if (Cancel cancel{PQgetCancel(c->conn.get())}) {
            char errbuf[256];
            PQcancel(cancel.get(), errbuf, sizeof errbuf);
          }
        } else if (c->cancel_sent && now_ns - stop_mono_ns_ >= kStopGraceNs + kCancelWaitNs) {
          // Still no reply: unfinished, dropped (see record()).
          c->statement_rows.clear();
          c->inflight.clear();
          finish(*c);
        }
        break;
      default:  // idle, rolling_back, resetting, backoff: nothing worth waiting for
        finish(*c);
        break;
    }
  }
}

void Worker::finish(Client& c) {
  if (c.state == ClientState::done) return;
  c.state = ClientState::done;
  close_connection(c);  // the backend exits now, not when the driver is destroyed
  --active_;
}

void Worker::flush(std::int64_t now_ns) {
  last_flush_mono_ns_ = now_ns;
  if (pending_.empty()) return;
  std::size_t sent_rows = pending_.queries.size();
  sink_(std::move(pending_));
  pending_ = schema::Batch{};
  reserve_rows_ = std::clamp<std::size_t>(sent_rows + sent_rows / 4, 64, kFlushRows);
  pending_.queries.reserve(reserve_rows_);
}

}  // namespace detail

struct Driver::Impl {
  DriverOptions options;
  Sink sink;
  int threads = 1;
  std::vector<detail::Client> clients;
  std::vector<std::unique_ptr<detail::ThreadStats>> stats;
  std::string server_version;
  bool connected = false;
  bool ran = false;
  std::atomic<bool> abort{false};

  mutable std::mutex interval_mu;
  common::LatencyHistogram interval_previous;
  std::int64_t interval_previous_errors = 0;
  std::int64_t interval_start_mono_ns = 0;
  struct Counters {
    std::int64_t lag_sum_ns = 0, lag_count = 0, lag_max_ns = 0, skipped = 0, late = 0,
                 connections = 0;
  };
  Counters interval_previous_counters;
  std::int64_t initial_connections = 0;  // opened by connect()
  // -r: per statement id, over all threads, after run().
  std::vector<std::int64_t> statement_sum_ns, statement_count;

  // The driver threads start in run(): each opens its own clients'
  // connections and then drives them, as pgbench's threads do, so every
  // backend first talks to the thread that will drive it, right before it
  // does, and the scheduler tends to keep the two on one CPU. Measured at
  // -c 8 on 2 CPUs: connected from one thread, or connected before the
  // samplers and the clock-offset connection start, most runs drive their
  // backends across CPUs, each query then waking a task on the other CPU,
  // and run up to 25 % slower. Between connecting and driving they wait at
  // the gate: open once all are connected, cancelled on a failure. run()
  // joins them on every path.
  enum class Gate { closed, open, cancelled };
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  Gate gate = Gate::closed;
  int threads_connected = 0;
  std::atomic<bool> connect_failed{false};
  std::vector<std::exception_ptr> failures;              // per thread
  std::vector<std::unique_ptr<detail::Worker>> workers;  // made by run() before the gate opens
  std::vector<std::jthread> running;                     // last: joined before the rest goes

  void open_client(int i, schema::Batch& batch, std::mutex& batch_mu);
  void thread_main(int t, schema::Batch& batch, std::mutex& batch_mu);
  void release(Gate to) {
    {
      std::lock_guard lock(gate_mu);
      if (gate == Gate::closed) gate = to;
    }
    gate_cv.notify_all();
  }

  Counters counters() const {
    Counters c;
    for (const auto& s : stats) {
      c.lag_sum_ns += s->lag_sum_ns.load(std::memory_order_relaxed);
      c.lag_count += s->lag_count.load(std::memory_order_relaxed);
      c.lag_max_ns = std::max(c.lag_max_ns, s->lag_max_ns.load(std::memory_order_relaxed));
      c.skipped += s->skipped.load(std::memory_order_relaxed);
      c.late += s->late.load(std::memory_order_relaxed);
      c.connections += s->connections.load(std::memory_order_relaxed);
    }
    c.connections += initial_connections;
    return c;
  }

  // Totals over all threads so far.
  common::LatencyHistogram totals(std::int64_t& errors) const {
    common::LatencyHistogram all;
    errors = 0;
    for (const auto& s : stats) {
      s->latency.add_to(all);
      errors += s->errors.load(std::memory_order_relaxed);
    }
    return all;
  }
};

Driver::Driver(DriverOptions options, Sink sink) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->sink = std::move(sink);
  impl_->threads = std::max(1, std::min(impl_->options.threads, impl_->options.clients));
  for (int t = 0; t < impl_->threads; ++t) {
    impl_->stats.push_back(std::make_unique<detail::ThreadStats>());
  }
  impl_->interval_start_mono_ns = mono_now_ns();
}

Driver::~Driver() = default;

void Driver::connect() {
  const DriverOptions& o = impl_->options;
  if (impl_->connected) throw Error(ErrorKind::runtime, "cannot connect the driver twice");
  if (o.clients < 1) {
    throw_usage(fmt::format("cannot start the driver: -c must be at least 1, not {}", o.clients));
  }
  if (o.threads < 1) {
    throw_usage(fmt::format("cannot start the driver: -j must be at least 1, not {}", o.threads));
  }
  if (o.duration_s.has_value() == o.queries_per_client.has_value()) {
    throw_usage("cannot start the driver: give exactly one of -T (seconds) and -t (transactions)");
  }
  if (o.duration_s && !(std::isfinite(*o.duration_s) && *o.duration_s > 0)) {
    throw_usage(fmt::format("cannot start the driver: -T must be positive, not {}", *o.duration_s));
  }
  if (o.queries_per_client && *o.queries_per_client < 1) {
    throw_usage(fmt::format("cannot start the driver: -t must be at least 1, not {}",
                            *o.queries_per_client));
  }
  if (o.scripts.empty() && o.sql.find_first_not_of(" \t\r\n;") == std::string::npos) {
    throw_usage("cannot run the SQL: it is empty (give --sql or -f)");
  }
  if (o.rate_tps && !(std::isfinite(*o.rate_tps) && *o.rate_tps > 0)) {
    throw_usage(fmt::format("cannot start the driver: -R must be positive, not {}", *o.rate_tps));
  }
  if (o.latency_limit_ms && !(std::isfinite(*o.latency_limit_ms) && *o.latency_limit_ms > 0)) {
    throw_usage(
        fmt::format("cannot start the driver: -L must be positive, not {}", *o.latency_limit_ms));
  }
  if (o.skip_late && !(o.rate_tps && o.latency_limit_ms)) {
    throw_usage("cannot start the driver: --skip-late needs both -R and -L");
  }
  if (o.pipeline < 0 || o.pipeline > detail::kMaxPipeline) {
    throw_usage(fmt::format("cannot start the driver: --pipeline must be 1..{}, not {}",
                            detail::kMaxPipeline, o.pipeline));
  }
  if (o.pipeline > 0) {
    if (o.connect_per_transaction || o.rate_tps) {
      throw_usage("cannot start the driver: --pipeline does not go with -C or -R");
    }
    if (o.per_statement) throw_usage("cannot start the driver: --pipeline does not go with -r");
    for (const auto& s : o.scripts) {
      bool sleeps = std::any_of(s.commands.begin(), s.commands.end(), [](const ScriptCommand& c) {
        return c.kind == ScriptCommand::Kind::sleep;
      });
      if (sleeps || s.sql_commands() != 1) {
        throw_usage(fmt::format(
            "cannot use --pipeline with script {}: it needs exactly one SQL command and no \\sleep",
            s.name));
      }
    }
    if (o.scripts.empty() && o.protocol == Protocol::simple &&
        o.sql.find(';') < o.sql.find_last_not_of(" \t\r\n;")) {
      throw_usage("cannot use --pipeline with several statements in one --sql string");
    }
  }
  if (o.per_statement && o.scripts.empty()) {
    throw_usage("cannot start the driver: -r needs scripts (internal: run_command makes one)");
  }

  impl_->clients = std::vector<detail::Client>(static_cast<std::size_t>(o.clients));
  for (int i = 0; i < o.clients; ++i) {
    detail::Client& c = impl_->clients[static_cast<std::size_t>(i)];
    c.client_id = i;
    c.thread = i % impl_->threads;  // round-robin, as run() assigns them
  }
  // Client 0 here, for the checks (SQL, scale, server version): a bad
  // conninfo or SQL fails before anything runs. The others connect in run().
  schema::Batch batch;
  std::mutex batch_mu;
  try {
    impl_->open_client(0, batch, batch_mu);
  } catch (...) {
    impl_->clients.clear();
    throw;
  }
  if (o.per_statement) {
    const auto ids = detail::number_statements(o.scripts);
    for (std::size_t s = 0; s < o.scripts.size(); ++s) {
      for (std::size_t k = 0; k < o.scripts[s].commands.size(); ++k) {
        if (ids[s][k] < 0) continue;
        const ScriptCommand& cmd = o.scripts[s].commands[k];
        batch.statements.push_back(schema::StatementRow{.statement = ids[s][k],
                                                        .script = o.scripts[s].name,
                                                        .line = cmd.line,
                                                        .sql = source_text(cmd, o.variables)});
      }
    }
  }
  impl_->connected = true;
  impl_->sink(std::move(batch));
}

void Driver::Impl::open_client(int i, schema::Batch& batch, std::mutex& batch_mu) {
  const DriverOptions& o = options;
  detail::Client& c = clients[static_cast<std::size_t>(i)];
  if (o.connect_per_transaction && i > 0) return;  // -C: they connect per transaction
  std::string application_name = fmt::format("stallscope/{}", i);
  std::int64_t begin_ns = mono_now_ns();
  c.conn = pg::connect(o.conninfo, application_name);
  std::int64_t latency_ns = mono_now_ns() - begin_ns;
  std::int64_t connected_wall_ns = wall_now_ns();
  PGconn* conn = c.conn.get();
  PQsetNoticeProcessor(conn, detail::discard_notice, nullptr);
  if (i == 0) {
    const char* version = PQparameterStatus(conn, "server_version");
    server_version = version ? version : "";
    if (o.protocol != Protocol::simple && o.scripts.empty()) {
      detail::check_sql(conn, o.sql, o.protocol);
    }
    if (!o.scripts.empty()) options.scale = detail::script_scale(conn, o);
  }
  if (o.protocol == Protocol::prepared) detail::prepare_statements(conn, o);
  if (o.pipeline > 0 && !PQenterPipelineMode(conn)) {
    throw Error(ErrorKind::postgres,
                fmt::format("cannot enter pipeline mode: {}", pg::error_message(conn)));
  }
  c.backend_pid = PQbackendPID(conn);
  std::lock_guard lock(batch_mu);
  ++initial_connections;
  batch.clients.push_back(schema::ClientRow{
      .client_id = i,
      .connection = 0,
      .thread = c.thread,
      .backend_pid = c.backend_pid,
      .connect_ns = connected_wall_ns,
      .connect_latency_ns = latency_ns,
      .application_name = std::move(application_name),
  });
  // -C: client 0's connection served the checks; transactions connect anew.
  if (o.connect_per_transaction) c.conn.reset();
}

void Driver::Impl::thread_main(int t, schema::Batch& batch, std::mutex& batch_mu) {
  set_thread_name((kDriverThreadPrefix + std::to_string(t)).c_str());
  const auto ti = static_cast<std::size_t>(t);
  try {
    for (int i = t == 0 ? threads : t; i < options.clients && !connect_failed.load();
         i += threads) {
      open_client(i, batch, batch_mu);
    }
  } catch (...) {
    failures[ti] = std::current_exception();
    connect_failed.store(true);
  }
  std::unique_lock lock(gate_mu);
  ++threads_connected;
  gate_cv.notify_all();
  gate_cv.wait(lock, [this] { return gate != Gate::closed; });
  if (gate == Gate::cancelled) return;
  lock.unlock();
  try {
    workers[ti]->run();
  } catch (...) {
    failures[ti] = std::current_exception();
    abort.store(true);
  }
}

void Driver::run() {
  if (!impl_->connected) {
    throw Error(ErrorKind::runtime, "cannot run the driver: connect() was not called");
  }
  if (impl_->ran) throw Error(ErrorKind::runtime, "cannot run the driver twice");
  impl_->ran = true;

  const DriverOptions& o = impl_->options;
  Impl* impl = impl_.get();
  auto& workers = impl->workers;
  // The threads open their clients' connections (client 0's is open); the
  // gate opens once all are, so no query is sent before that.
  schema::Batch batch;
  std::mutex batch_mu;
  impl->failures.assign(static_cast<std::size_t>(impl->threads), nullptr);
  try {
    for (int t = 0; t < impl->threads; ++t) {
      impl->running.emplace_back(
          [impl, t, &batch, &batch_mu] { impl->thread_main(t, batch, batch_mu); });
    }
    {
      std::unique_lock lock(impl->gate_mu);
      impl->gate_cv.wait(lock, [impl] { return impl->threads_connected == impl->threads; });
    }
    for (auto& f : impl->failures) {
      if (f) std::rethrow_exception(f);
    }
    std::sort(batch.clients.begin(), batch.clients.end(),
              [](const auto& x, const auto& y) { return x.client_id < y.client_id; });
    if (!batch.clients.empty()) impl->sink(std::move(batch));

    std::int64_t start_ns = mono_now_ns();
    {
      std::lock_guard lock(impl->interval_mu);
      impl->interval_start_mono_ns = start_ns;
    }
    std::optional<std::int64_t> deadline_ns;
    if (o.duration_s) deadline_ns = start_ns + static_cast<std::int64_t>(*o.duration_s * 1e9);
    std::vector<std::vector<detail::Client*>> assigned(static_cast<std::size_t>(impl->threads));
    for (auto& c : impl->clients) assigned[static_cast<std::size_t>(c.thread)].push_back(&c);
    for (int t = 0; t < impl->threads; ++t) {
      workers.push_back(
          std::make_unique<detail::Worker>(o, impl->sink, *impl->stats[static_cast<std::size_t>(t)],
                                           std::move(assigned[static_cast<std::size_t>(t)]),
                                           deadline_ns, impl->abort, impl->threads));
    }
  } catch (...) {
    impl->release(Impl::Gate::cancelled);
    impl->running.clear();  // joins; the connections close with the Driver
    throw;
  }
  impl->release(Impl::Gate::open);
  impl->running.clear();  // joins
  for (auto& c : impl_->clients) c.conn.reset();
  if (o.per_statement) {
    for (const auto& w : workers) {
      impl_->statement_sum_ns.resize(w->statement_sum_ns.size());
      impl_->statement_count.resize(w->statement_count.size());
      for (std::size_t i = 0; i < w->statement_sum_ns.size(); ++i) {
        impl_->statement_sum_ns[i] += w->statement_sum_ns[i];
        impl_->statement_count[i] += w->statement_count[i];
      }
    }
  }
  for (auto& f : impl_->failures) {
    if (f) std::rethrow_exception(f);
  }
}

IntervalStats Driver::take_interval_stats() {
  std::lock_guard lock(impl_->interval_mu);
  std::int64_t now_ns = mono_now_ns();
  std::int64_t errors = 0;
  common::LatencyHistogram total = impl_->totals(errors);
  common::LatencyHistogram delta = total.minus(impl_->interval_previous);
  IntervalStats out{
      .queries = delta.count() + (errors - impl_->interval_previous_errors),
      .errors = errors - impl_->interval_previous_errors,
      .mean_latency_ms = delta.mean_ns() / 1e6,
      .p99_latency_ms = static_cast<double>(delta.percentile_ns(0.99)) / 1e6,
      .interval_ns = now_ns - impl_->interval_start_mono_ns,
  };
  const auto counters = impl_->counters();
  const auto& before = impl_->interval_previous_counters;
  if (impl_->options.rate_tps) {
    std::int64_t n = counters.lag_count - before.lag_count;
    out.mean_lag_ms =
        n > 0 ? static_cast<double>(counters.lag_sum_ns - before.lag_sum_ns) / n / 1e6 : 0.0;
  }
  out.skipped = counters.skipped - before.skipped;
  out.late = counters.late - before.late;
  impl_->interval_previous_counters = counters;
  impl_->interval_previous = std::move(total);
  impl_->interval_previous_errors = errors;
  impl_->interval_start_mono_ns = now_ns;
  return out;
}

Summary Driver::summary() const {
  std::int64_t errors = 0;
  common::LatencyHistogram total = impl_->totals(errors);
  std::int64_t first_ns = 0;
  std::int64_t last_ns = 0;
  for (const auto& s : impl_->stats) {
    std::int64_t first = s->first_send_mono_ns.load(std::memory_order_relaxed);
    if (first != 0 && (first_ns == 0 || first < first_ns)) first_ns = first;
    last_ns = std::max(last_ns, s->last_done_mono_ns.load(std::memory_order_relaxed));
  }
  Summary out{
      .queries = total.count() + errors,
      .errors = errors,
      .elapsed_ns = first_ns != 0 && last_ns > first_ns ? last_ns - first_ns : 0,
      .mean_latency_ms = total.mean_ns() / 1e6,
      .p99_latency_ms = static_cast<double>(total.percentile_ns(0.99)) / 1e6,
  };
  if (out.elapsed_ns > 0) {
    out.tps = static_cast<double>(out.queries - out.errors) * 1e9 / out.elapsed_ns;
  }
  const auto counters = impl_->counters();
  if (impl_->options.rate_tps) {
    out.mean_lag_ms = counters.lag_count > 0
                          ? static_cast<double>(counters.lag_sum_ns) / counters.lag_count / 1e6
                          : 0.0;
    out.max_lag_ms = static_cast<double>(counters.lag_max_ns) / 1e6;
  }
  out.skipped = counters.skipped;
  out.late = counters.late;
  out.connections = counters.connections;
  if (impl_->options.per_statement) {
    const auto& scripts = impl_->options.scripts;
    const auto ids = detail::number_statements(scripts);
    for (std::size_t s = 0; s < scripts.size(); ++s) {
      for (std::size_t k = 0; k < scripts[s].commands.size(); ++k) {
        auto id = static_cast<std::size_t>(ids[s][k]);
        if (ids[s][k] < 0) continue;
        const ScriptCommand& cmd = scripts[s].commands[k];
        StatementStats st{.statement = ids[s][k],
                          .script = scripts[s].name,
                          .line = cmd.line,
                          .sql = source_text(cmd, impl_->options.variables)};
        if (id < impl_->statement_count.size()) {
          st.executions = impl_->statement_count[id];
          if (st.executions > 0) {
            st.mean_latency_ms =
                static_cast<double>(impl_->statement_sum_ns[id]) / st.executions / 1e6;
          }
        }
        out.statements.push_back(std::move(st));
      }
    }
  }
  return out;
}

std::string Driver::server_version() const {
  return impl_->server_version;
}

Protocol parse_protocol(const std::string& name) {
  if (name == "simple") return Protocol::simple;
  if (name == "extended") return Protocol::extended;
  if (name == "prepared") return Protocol::prepared;
  throw_usage(fmt::format(
      "cannot use query protocol '{}': expected simple, extended or prepared (-M)", name));
}

const char* protocol_name(Protocol p) {
  switch (p) {
    case Protocol::simple:
      return "simple";
    case Protocol::extended:
      return "extended";
    case Protocol::prepared:
      return "prepared";
  }
  return "unknown";
}

}  // namespace stallscope::driver
