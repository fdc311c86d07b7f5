// Worker reconnecting (driver/worker.h): a broken connection is reset
// asynchronously (PQresetStart / PQresetPoll over the epoll instance) with
// backoff between attempts, until it is back or the run ends (with -t: until
// the client has failed for DriverOptions::give_up_after_ns); with -C each
// transaction opens its own connection (blocking, as pgbench -C does).
//
// Each failed attempt is stored as a failed transaction (SQLSTATE 08001,
// error "cannot reconnect: <libpq message>", no connection) whose row
// starts where the client's previous row ended (the broken transaction, or
// the previous attempt's row) and ends when the next attempt starts (or the
// client ends): a client's rows then cover the outage up to the attempt that
// succeeds, which explain reads as a connection_lost stall and counts in its
// time accounting. They are not transactions: they do not count towards -t
// nor in the summary's queries and errors (Summary::connect_failures).
//
// The delays come from common/backoff.h's BackoffDelays, the schedule
// RetryBackoff uses too; RetryBackoff itself does not fit here: it runs a
// synchronous attempt and learns its outcome from an exception, while a
// reset is started here and finishes (or fails) later in continue_reset().
#include <libpq-fe.h>
#include <poll.h>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/pg.h"
#include "driver/connection.h"
#include "driver/worker.h"

namespace stallscope::driver::detail {

// -C: opens the client's connection for the next transaction (blocking, as
// pgbench -C does). On failure: a failed connect (SQLSTATE 08001, as a
// failed reconnect attempt: not a transaction, not counted towards -t),
// whose row covers the backoff after it too, then the backoff. A connect the
// run's end interrupted (-T reached, `stop`) is the transaction cut short:
// unfinished. Returns whether the transaction can be sent.
bool Worker::connect_for_transaction(Client& c) {
  std::string application_name = fmt::format("stallscope/{}", c.client_id);
  std::int64_t begin_ns = mono_now_ns();
  try {
    c.conn = pg::connect(options_.conninfo, application_name,
                         {.stop = stop_, .deadline_mono_ns = deadline_mono_ns_});
    PQsetNoticeProcessor(c.conn.get(), discard_notice, nullptr);
    if (options_.protocol == Protocol::prepared) prepare_statements(c.conn.get(), options_);
  } catch (const Error& e) {
    close_connection(c);
    c.backend_pid.reset();
    std::int64_t now = mono_now_ns();
    if (e.kind() == ErrorKind::runtime) {  // pg::connect: interrupted by the run's end
      record_unfinished(c, now);
      finish(c);
      return false;
    }
    // Its row runs from the transaction's start (or the end of the previous
    // failed connect's row, under -R a later time) through the backoff, to
    // the next try or the client's end: written then (flush_failed_attempt).
    if (c.sent_mono_ns >= c.waiting_since_mono_ns) {
      c.waiting_since_mono_ns = c.sent_mono_ns;
      c.waiting_since_wall_ns = c.sent_wall_ns;
    }
    c.failed_attempt = e.what();
    if (++c.connect_failures == 1) c.down_since_mono_ns = begin_ns;
    set_reconnecting(c, true);
    if (stopping_ || should_stop(now)) {
      finish(c);
    } else if (!deadline_mono_ns_ && now - c.down_since_mono_ns >= options_.give_up_after_ns) {
      c.lost_error = e.what();
      bump(stats_.clients_lost, 1);
      finish(c);
    } else {
      c.state = ClientState::backoff;
      c.retry_at_mono_ns = now + kReconnectBackoff.after_failures(c.connect_failures);
    }
    return false;
  }
  std::int64_t now = mono_now_ns();
  c.connect_failures = 0;
  record_connection(c, now - begin_ns, std::move(application_name));
  return true;
}

void Worker::set_reconnecting(Client& c, bool on) {
  if (c.reconnecting == on) return;
  c.reconnecting = on;
  bump(stats_.reconnecting, on ? 1 : -1);
}

// The client's connection is (again) up: a new connection number and its
// `client` row; the old connection's row, and its backend pid, stay.
void Worker::record_connection(Client& c, std::int64_t connect_latency_ns,
                               std::string application_name) {
  c.backend_pid = PQbackendPID(c.conn.get());
  const auto local = local_address(c.conn.get());
  bump(stats_.connections, 1);
  set_reconnecting(c, false);
  pending_.clients.push_back(schema::ClientRow{
      .client_id = c.client_id,
      .connection = ++c.connection,
      .thread = c.thread,
      .backend_pid = c.backend_pid,
      .connect_ns = wall_now_ns(),
      .connect_latency_ns = connect_latency_ns,
      .application_name = std::move(application_name),
      .local_addr = local ? std::optional(local->addr) : std::nullopt,
      .local_port = local ? std::optional(local->port) : std::nullopt,
  });
}

void Worker::begin_reset(Client& c, std::int64_t now_ns) {
  if (stopping_) {
    finish(c);
    return;
  }
  c.reset_attempts = 0;
  c.backend_pid.reset();  // its rows until the next connection have none
  c.down_since_mono_ns = now_ns;
  c.waiting_since_mono_ns = now_ns;
  c.waiting_since_wall_ns = wall_now_ns();
  set_reconnecting(c, true);
  start_reset_attempt(c, now_ns);
}

void Worker::start_reset_attempt(Client& c, std::int64_t now_ns) {
  flush_failed_attempt(c, now_ns);  // the previous attempt's row ends here
  ++c.reset_attempts;
  c.reset_started_mono_ns = now_ns;
  unwatch(c);  // the socket is closed and a new one opened, maybe with the same number
  if (!PQresetStart(c.conn.get())) {
    reset_attempt_failed(c, now_ns, pg::error_message(c.conn.get()));
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
      reset_attempt_failed(c, mono_now_ns(), pg::error_message(conn));
      return;
  }
  if (options_.protocol == Protocol::prepared) {
    try {
      prepare_statements(conn, options_);
    } catch (const Error& e) {
      reset_attempt_failed(c, mono_now_ns(), e.what());
      return;
    }
  }
  if (options_.pipeline > 0 && !PQenterPipelineMode(conn)) {
    reset_attempt_failed(c, mono_now_ns(), pg::error_message(conn));
    return;
  }
  std::int64_t now = mono_now_ns();
  c.reset_attempts = 0;
  c.needs_rollback = false;
  record_connection(c, now - c.reset_started_mono_ns, fmt::format("stallscope/{}", c.client_id));
  c.state = ClientState::idle;
  send_next(c, now);
}

// A reset attempt failed (`message`: libpq's reason): its row waits for the
// next attempt (or the end of the client); the client gives up (-t) or backs
// off.
void Worker::reset_attempt_failed(Client& c, std::int64_t now_ns, std::string message) {
  c.failed_attempt = "cannot reconnect: " + message;
  if (stopping_ || should_stop(now_ns)) {
    finish(c);
    return;
  }
  if (!deadline_mono_ns_ && now_ns - c.down_since_mono_ns >= options_.give_up_after_ns) {
    c.lost_error = c.failed_attempt;
    bump(stats_.clients_lost, 1);
    finish(c);
    return;
  }
  c.state = ClientState::backoff;
  c.retry_at_mono_ns = now_ns + kReconnectBackoff.after_failures(c.reset_attempts);
}

void Worker::flush_failed_attempt(Client& c, std::int64_t end_mono_ns) {
  if (!c.failed_attempt) return;
  // A transaction that could not be sent for want of a connection, from the
  // end of the client's previous row to `end_mono_ns`.
  c.sent_wall_ns = c.waiting_since_wall_ns;
  c.sent_mono_ns = c.waiting_since_mono_ns;
  c.rows = 0;
  c.failed = true;
  c.lag_ns.reset();
  c.slept_ns = 0;
  c.statement_rows.clear();
  c.sqlstate = schema::kConnectFailedSqlstate;
  c.error = std::move(c.failed_attempt);
  c.failed_attempt.reset();
  record(c, end_mono_ns, RowKind::failed_connect);
  c.waiting_since_wall_ns += end_mono_ns - c.waiting_since_mono_ns;
  c.waiting_since_mono_ns = end_mono_ns;
}

}  // namespace stallscope::driver::detail
