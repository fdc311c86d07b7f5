// Pass 3: ASH rows (pg_activity_sample) of this run's backends (or, without
// their pids, of every client backend), by poll time, into the windows: per
// window the rows by "Type:Event" and by server wait class, the rows active
// on CPU, and the first blocking pid of Lock rows.
#include <cstdlib>

#include "correlate/passes.h"

namespace stallscope::correlate::detail {
namespace {

std::string event_label(const SQLite::Column& type, const SQLite::Column& event) {
  if (type.isNull()) return "CPU";
  return type.getString() + ":" + (event.isNull() ? std::string("?") : event.getString());
}

}  // namespace

bool is_server_wait_class(std::string_view type) {
  return type != "Client" && type != "Activity";
}

AshScan::AshScan(SQLite::Database& db, const AshInputs& in, std::vector<WindowAcc>& acc, Facts& f,
                 Attribution& att)
    : in_(in),
      acc_(acc),
      f_(f),
      att_(att),
      // With a sweep, each poll's round trip (ash_tick.duration_ns) bounds
      // when the backend was seen.
      st_(db, in.per_query ? "SELECT time_ns, pid, backend_type, state, wait_event_type, "
                             "wait_event, blocking_pids, (SELECT t.duration_ns FROM ash_tick t "
                             "WHERE t.ash_tick = pg_activity_sample.ash_tick) FROM "
                             "pg_activity_sample WHERE time_ns >= ?1 AND time_ns < ?2 ORDER BY "
                             "time_ns"
                           : "SELECT time_ns, pid, backend_type, state, wait_event_type, "
                             "wait_event, blocking_pids, NULL FROM pg_activity_sample WHERE "
                             "time_ns >= ?1 AND time_ns < ?2 ORDER BY time_ns") {
  st_.bind(1, in.span.start_ns);
  st_.bind(2, in.span.end_ns);
}

void AshScan::run_until(std::int64_t t) {
  while (!done_) {
    if (!pending_) {
      if (!st_.executeStep()) {
        done_ = true;
        return;
      }
      pending_ = true;
      pending_time_ns_ = st_.getColumn(0).getInt64();
    }
    if (pending_time_ns_ >= t) return;
    pending_ = false;
    handle();
  }
}

void AshScan::handle() {
  if (in_.use_pids) {
    if (!in_.path.backend_pids.contains(st_.getColumn(1).getInt())) return;
  } else {
    auto bt = st_.getColumn(2);
    if (!bt.isNull() && bt.getString() != "client backend") return;
  }
  const auto state_col = st_.getColumn(3);
  const std::optional<std::string> state =
      state_col.isNull() ? std::nullopt : std::optional<std::string>(state_col.getString());
  if (state && *state == "idle") return;
  // Per-query attribution: within the poll's round trip, ± kAttributionSlackNs.
  if (const auto* pq = in_.per_query) {
    const auto at = st_.getColumn(0).getInt64();
    const auto poll_ns = st_.getColumn(7).isNull() ? 0 : st_.getColumn(7).getInt64();
    pq->sweep.advance_to(at + poll_ns + kAttributionSlackNs);
    if (pq->sweep.busy_ns(pq->backends.slot_of_pid(st_.getColumn(1).getInt()),
                          at - kAttributionSlackNs, at + poll_ns + kAttributionSlackNs) == 0) {
      ++att_.ash_samples_outside;
      return;
    }
  }
  auto i = in_.windows.find(st_.getColumn(0).getInt64());
  if (i < 0) return;
  auto& a = acc_[static_cast<std::size_t>(i)];
  auto label = event_label(st_.getColumn(4), st_.getColumn(5));
  ++f_.ash_rows;
  // pg_stat_activity reads state from a snapshot but the wait event live,
  // so a backend that just finished shows 'active' with Client:ClientRead:
  // it is waiting for the client, not a server wait. Not a "top wait".
  const bool waiting_for_client =
      !st_.getColumn(4).isNull() && st_.getColumn(4).getString() == "Client";
  if (!waiting_for_client) {
    ++a.ash_event_rows[label];
    ++f_.ash_event_rows[label];
  }
  if (st_.getColumn(4).isNull()) {
    if (state && *state == "active") ++a.ash_cpu_rows;
    return;
  }
  auto cls = st_.getColumn(4).getString();
  if (!is_server_wait_class(cls)) return;
  if (cls == "Lock" && !st_.getColumn(6).isNull()) {
    const auto blockers = st_.getColumn(6).getString();
    const int first = std::atoi(blockers.c_str());
    if (first > 0) ++a.blocking_pid_rows[first];
  }
  ++a.ash_class_rows[cls];
  ++f_.ash_class_rows[cls];
}

}  // namespace stallscope::correlate::detail
