// Worker's per-query path (driver/worker.h): send a client's next
// transaction (after a ROLLBACK, -R's schedule, --skip-late), take its
// results as they arrive, and record it as a row. These functions call each
// other once per query; they stay together in this one translation unit, as
// when the driver was one file, so the compiler can still inline among them
// (send_next() into transaction_done(), for one).
#include <libpq-fe.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/pg.h"
#include "common/units.h"
#include "driver/connection.h"
#include "driver/worker.h"

namespace stallscope::driver::detail {

// Closed loop: sends the client's next transaction now, or finishes the
// client when the run is over for it.
void Worker::send_next(Client& c, std::int64_t now_ns) {
  if (options_.pipeline > 0) {
    pipeline_fill(c, now_ns);
    return;
  }
  if (c.retrying) [[unlikely]] {  // --max-tries: roll back, then the same script again
    if (c.needs_rollback) {
      c.needs_rollback = false;
      if (PQsendQuery(c.conn.get(), "ROLLBACK")) {
        c.state = ClientState::rolling_back;
      } else {
        c.retrying = false;
        begin_reset(c, now_ns);
      }
      return;
    }
    restart_try(c, now_ns);
    return;
  }
  if (stopping_ || (deadline_mono_ns_ && now_ns >= *deadline_mono_ns_) || transactions_done(c) ||
      abort_.load(std::memory_order_relaxed)) {
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
      // Due later (even after -T's deadline: the client then waits for the
      // deadline, so a slow rate still drives for the whole -T).
      if (sched > now_ns) {
        c.state = ClientState::throttling;
        return;
      }
      if (options_.skip_late && options_.latency_limit_ms &&
          static_cast<double>(now_ns - sched) >
              *options_.latency_limit_ms * common::kNsPerMsDouble) {
        c.scheduled_mono_ns.reset();
        record_skipped(c, sched, now_ns);
        if (transactions_done(c)) {
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

void Worker::send_transaction(Client& c) {
  c.rows = 0;
  c.failed = false;
  c.in_copy_out = false;
  c.cancel_sent = false;
  c.sqlstate.reset();
  c.error.reset();
  c.slept_ns = 0;
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

// A ready socket (or one that cannot be watched) goes to its state's
// handler. Here, next to on_readable(), so that the per-query call inlines.
void Worker::dispatch(Client& c) {
  if (c.state == ClientState::resetting) {
    continue_reset(c);
  } else if (options_.pipeline > 0 && c.state == ClientState::busy) {
    pipeline_drain(c);
  } else if (c.in_script_pipeline && c.state == ClientState::busy) {
    pipeline_results(c);
  } else if (c.state == ClientState::busy || c.state == ClientState::rolling_back) {
    on_readable(c);
  }
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
      if (c.storing != ScriptCommand::Store::none) [[unlikely]]
        store_result(c, res);
      break;
    case PGRES_COMMAND_OK: {
      if (const auto affected = pg::affected_rows(res)) c.rows += *affected;
      c.gset_rows = 0;  // \gset: the last result has no rows
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
      c.gset_rows = 0;
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
  if (c.storing != ScriptCommand::Store::none) [[unlikely]]
    finish_store(c);
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
  if (c.state == ClientState::busy) {
    if (!options_.scripts.empty()) check_transaction_closed(c);
    if (c.failed && should_retry(c, now_ns)) [[unlikely]] {
      begin_retry(c, now_ns);
      return;
    }
    record(c, now_ns);
  }
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
  if (c.failed && PQtransactionStatus(conn) != PQTRANS_IDLE) c.needs_rollback = true;
  send_next(c, now_ns);
}

void Worker::record(Client& c, std::int64_t done_mono_ns, RowKind kind) {
  if (stopping_ && c.cancel_sent && c.failed && c.sqlstate == kQueryCanceled) {
    // Cut short by the driver's own cancel at the end of the run: unfinished,
    // not a failure (pgbench does not count these either).
    record_unfinished(c, done_mono_ns);
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
  if (kind == RowKind::failed_connect) {
    // Not a transaction: counted apart, and not towards -t.
    bump(stats_.connect_failures, 1);
    ++c.attempt_rows;
  } else {
    if (!c.failed) stats_.latency.record_ns(latency_ns);
    if (options_.latency_limit_ms &&
        static_cast<double>(latency_ns) > *options_.latency_limit_ms * common::kNsPerMsDouble) {
      bump(stats_.late, 1);
    }
    if (c.failed) {
      stats_.errors.store(stats_.errors.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
      if (options_.exit_on_abort) [[unlikely]] {
        stats_.ended_on_failure.store(true, std::memory_order_relaxed);
        abort_.store(true);  // every thread winds down, as at -T's end
      }
      if (c.sqlstate == kSerializationFailure) bump(stats_.serialization_failures, 1);
      if (c.sqlstate == kDeadlockDetected) bump(stats_.deadlock_failures, 1);
      if (options_.verbose_errors && options_.max_tries != 1) {
        fmt::print(stderr, "client {} ends the failed transaction (try {}{}): {}\n", c.client_id,
                   c.tries, options_.max_tries > 0 ? fmt::format("/{}", options_.max_tries) : "",
                   c.error.value_or(""));
      }
    }
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
  if (c.slept_ns > 0) {
    pending_.query_sleeps.push_back(schema::QuerySleepRow{
        .client_id = c.client_id, .seq = seq, .start_ns = c.sent_wall_ns, .sleep_ns = c.slept_ns});
  }
  if (c.tries > 1) [[unlikely]] {
    bump(stats_.retried, 1);
    bump(stats_.retries, c.tries - 1);
    pending_.query_retries.push_back(schema::QueryRetryRow{.client_id = c.client_id,
                                                           .seq = seq,
                                                           .start_ns = c.sent_wall_ns,
                                                           .tries = c.tries,
                                                           .retried_ns = c.retried_ns});
    c.tries = 1;
  }
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

void Worker::record_unfinished(Client& c, std::int64_t now_ns) {
  bump(stats_.unfinished, 1);
  const std::int64_t seq = c.next_seq++;
  pending_.query_unfinished.push_back(schema::QueryUnfinishedRow{
      .client_id = c.client_id,
      .seq = seq,
      .start_ns = c.sent_wall_ns,
      .elapsed_ns = now_ns - c.sent_mono_ns,
      .connection = c.backend_pid ? std::optional<std::int64_t>(c.connection) : std::nullopt,
      .lag_ns = c.lag_ns,
  });
  // Its time in \sleep, under its key as an answered one's: not query time.
  if (c.slept_ns > 0) {
    pending_.query_sleeps.push_back(schema::QuerySleepRow{
        .client_id = c.client_id, .seq = seq, .start_ns = c.sent_wall_ns, .sleep_ns = c.slept_ns});
  }
  // Its -r rows would belong to a query row it does not have.
  c.statement_rows.clear();
  c.slept_ns = 0;
  c.sqlstate.reset();
  c.error.reset();
}

}  // namespace stallscope::driver::detail
