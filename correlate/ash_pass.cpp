// Pass 3: ASH rows (pg_activity_sample) of this run's backends (or, without
// their pids, of every client backend), by poll time, into the windows: per
// window the rows by "Type:Event" and by server wait class, the rows active
// on CPU, and the first blocking pid of Lock rows.
#include <fmt/format.h>

#include "common/parse.h"
#include "correlate/passes.h"

namespace stallscope::correlate::detail {
namespace {

std::string event_label(const schema::AshRow& row) {
  const auto type = row.wait_event_type;
  if (!type) return "CPU";
  const auto event = row.wait_event;
  return fmt::format("{}:{}", *type, event ? *event : std::string_view("?"));
}

// The first pid of the list the ASH sampler stores (pg_blocking_pids joined
// by ',': "123,456" → 123); 0 when the text does not start with one.
int first_blocking_pid(std::string_view pids) {
  const auto digits = pids.find_first_not_of("0123456789");
  return common::parse_int(pids.substr(0, digits)).value_or(0);
}

}  // namespace

bool is_server_wait_class(std::string_view type) {
  return type != "Client" && type != "Activity";
}

AshScan::AshScan(RowSource<schema::AshRow> rows, const AshInputs& in, std::vector<WindowAcc>& acc,
                 Facts& f, Attribution& att)
    : in_(in), acc_(acc), f_(f), att_(att), rows_(std::move(rows)) {}

void AshScan::run_until(std::int64_t until_ns) {
  while (!done_) {
    if (!pending_) {
      if (!rows_(row_)) {
        done_ = true;
        return;
      }
      pending_ = true;
    }
    if (row_.time_ns >= until_ns) return;
    pending_ = false;
    handle();
  }
}

void AshScan::handle() {
  if (in_.use_pids) {
    if (!in_.path.backend_pids.contains(row_.pid)) return;
  } else {
    const auto bt = row_.backend_type;
    if (bt && *bt != "client backend") return;
  }
  const auto state = row_.state;
  if (state && *state == "idle") return;
  // Per-query attribution: within the poll's round trip, ± kAttributionSlackNs.
  if (const auto* pq = in_.per_query) {
    const auto at = row_.time_ns;
    const auto poll_ns = row_.poll_duration_ns;
    pq->sweep.advance_to(at + poll_ns + kAttributionSlackNs);
    if (pq->sweep.busy_ns(pq->backends.slot_of_pid(row_.pid), at - kAttributionSlackNs,
                          at + poll_ns + kAttributionSlackNs) == 0) {
      ++att_.ash_samples_outside;
      return;
    }
  }
  auto i = in_.windows.find(row_.time_ns);
  if (i < 0) return;
  auto& a = acc_[static_cast<std::size_t>(i)];
  auto label = event_label(row_);
  ++f_.ash_rows;
  // pg_stat_activity reads state from a snapshot but the wait event live,
  // so a backend that just finished shows 'active' with Client:ClientRead:
  // it is waiting for the client, not a server wait. Not a "top wait".
  const auto type = row_.wait_event_type;
  if (state && *state == "active") ++f_.ash_active_query_rows[row_.query_text_id.value_or(0)];
  if (!type || *type != "Client") {
    ++a.ash_event_rows[label];
    ++f_.ash_event_rows[label];
  }
  if (!type) {
    if (state && *state == "active") {
      ++a.ash_cpu_rows;
      ++f_.ash_cpu_query_rows[row_.query_text_id.value_or(0)];
    }
    return;
  }
  const std::string cls(*type);
  if (!is_server_wait_class(cls)) return;
  if (const auto blockers = row_.blocking_pids; cls == "Lock" && blockers) {
    if (const int first = first_blocking_pid(*blockers); first > 0) ++a.blocking_pid_rows[first];
  }
  ++a.ash_class_rows[cls];
  ++f_.ash_class_rows[cls];
}

}  // namespace stallscope::correlate::detail
