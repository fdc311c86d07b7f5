// Worker in libpq pipeline mode (--pipeline N, driver/worker.h): up to N
// transactions in flight per connection, each with its own Sync, completed
// in order as their Sync results arrive.
#include <libpq-fe.h>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/pg.h"
#include "driver/connection.h"
#include "driver/worker.h"

namespace stallscope::driver::detail {

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

// Runs the \set commands of c's script and binds its one SQL command (its
// index into `sql_command`); returns the message of a transaction that
// cannot go on, else nullopt.
std::optional<std::string> Worker::pipeline_bind_script(Client& c, std::size_t& sql_command) {
  const Script& script = options_.scripts[c.script];
  std::optional<std::string> error;
  for (std::size_t k = 0; k < script.commands.size() && !error; ++k) {
    const ScriptCommand& cmd = script.commands[k];
    if (cmd.kind == ScriptCommand::Kind::set) {
      try {
        const EvalContext context{c.values, options_.variables, c.rng, static_cast<int>(c.script),
                                  static_cast<int>(k)};
        c.values[static_cast<std::size_t>(cmd.target)].set(evaluate(*cmd.expr, context));
      } catch (const Error& e) {
        error = fmt::format("{}:{}: {}", script.name, cmd.line, e.what());
      }
    } else if (cmd.kind == ScriptCommand::Kind::sql) {
      sql_command = k;
      bind_command(c, cmd);
    }
  }
  return error;
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
    std::size_t sql_command = 0;
    if (auto error = pipeline_bind_script(c, sql_command)) {
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
        if (const auto affected = pg::affected_rows(res.get())) f.rows += *affected;
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

}  // namespace stallscope::driver::detail
