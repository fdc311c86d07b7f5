// Worker reconnecting (driver/worker.h): a broken connection is reset
// asynchronously (PQresetStart / PQresetPoll over the epoll instance) with
// backoff between attempts; with -C each transaction opens its own
// connection (blocking, as pgbench -C does).
//
// The delays come from common/backoff.h's BackoffDelays, the schedule
// RetryBackoff uses too; RetryBackoff itself does not fit here: it runs a
// synchronous attempt and learns its outcome from an exception, while a
// reset is started here and finishes (or fails) later in continue_reset(),
// and the driver gives up after kMaxResetAttempts, which RetryBackoff never
// does.
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
      c.retry_at_mono_ns = now + kReconnectBackoff.after_failures(c.connect_failures);
    }
    return false;
  }
  std::int64_t now = mono_now_ns();
  c.connect_failures = 0;
  record_connection(c, now - begin_ns, std::move(application_name));
  return true;
}

// The client's connection is (again) up: a new connection number and its
// `client` row; the old connection's row, and its backend pid, stay.
void Worker::record_connection(Client& c, std::int64_t connect_latency_ns,
                               std::string application_name) {
  c.backend_pid = PQbackendPID(c.conn.get());
  bump(stats_.connections, 1);
  pending_.clients.push_back(schema::ClientRow{
      .client_id = c.client_id,
      .connection = ++c.connection,
      .thread = c.thread,
      .backend_pid = c.backend_pid,
      .connect_ns = wall_now_ns(),
      .connect_latency_ns = connect_latency_ns,
      .application_name = std::move(application_name),
  });
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
  record_connection(c, now - c.reset_started_mono_ns, fmt::format("stallscope/{}", c.client_id));
  c.state = ClientState::idle;
  send_next(c, now);
}

void Worker::reset_attempt_failed(Client& c, std::int64_t now_ns) {
  if (stopping_ || c.reset_attempts >= kMaxResetAttempts) {
    finish(c);
    return;
  }
  c.state = ClientState::backoff;
  c.retry_at_mono_ns = now_ns + kReconnectBackoff.after_failures(c.reset_attempts);
}

}  // namespace stallscope::driver::detail
