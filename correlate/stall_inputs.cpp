// What the stall rules (stalls.cpp) read from the run file beyond the
// windows' sums: queries that lost their connection, and the query a
// blocking backend was running; and the query text server_cpu names.
#include <algorithm>
#include <memory>
#include <tuple>

#include <fmt/format.h>

#include "correlate/passes.h"
#include "schema/run_reader.h"

namespace stallscope::correlate::detail {

// Connection-loss errors per window with errors (a range read each):
// SQLSTATE class 08 or 57P01–57P03.
void count_connection_errors(const ConnectionErrorLookups& lookups,
                             const std::vector<Window>& windows,
                             std::vector<WindowSignals>& signals) {
  for (std::size_t i = 0; i < windows.size() && i < signals.size(); ++i) {
    const auto& w = windows[i];
    if (w.errors == 0 && w.connection_lost_ns == 0) continue;
    auto& g = signals[i];
    for (auto& e : lookups.errors_between(w.start_ns, w.end_ns)) {
      g.connection_sqlstates += fmt::format("{}{} ×{}", g.connection_sqlstates.empty() ? "" : ", ",
                                            e.sqlstate, e.queries);
      g.connection_errors += e.queries;
      if (e.sqlstate == schema::kConnectFailedSqlstate) g.connect_failures += e.queries;
      if (g.top_connection_sqlstate.empty()) g.top_connection_sqlstate = std::move(e.sqlstate);
    }
    if (g.connection_errors == 0) continue;
    for (auto& e : lookups.losses_overlapping(w.start_ns, w.end_ns)) {
      g.connection_lost_ns +=
          std::min(e.start_ns + e.latency_ns, w.end_ns) - std::max(e.start_ns, w.start_ns);
      if (!e.error.empty()) g.last_connection_error = std::move(e.error);
    }
  }
}

OutageFacts outage_facts(const ConnectionErrorLookups& lookups, Span span) {
  OutageFacts o;
  for (auto& e : lookups.errors_between(span.start_ns, span.end_ns + 1)) {
    o.sqlstates += fmt::format("{}{} ×{}", o.sqlstates.empty() ? "" : ", ", e.sqlstate, e.queries);
    if (e.sqlstate == schema::kConnectFailedSqlstate) {
      o.connect_failures += e.queries;
    } else {
      o.lost_queries += e.queries;
      if (o.top_lost_sqlstate.empty()) o.top_lost_sqlstate = std::move(e.sqlstate);
    }
  }
  if (o.lost_queries + o.connect_failures == 0) return o;
  bool first = true;
  for (auto& e : lookups.losses_overlapping(span.start_ns, span.end_ns + 1)) {
    o.first_ns = first ? e.start_ns : std::min(o.first_ns, e.start_ns);
    o.last_ns = first ? e.start_ns + e.latency_ns : std::max(o.last_ns, e.start_ns + e.latency_ns);
    first = false;
    if (!e.error.empty()) o.last_error = std::move(e.error);
  }
  return o;
}

// "query (state)", or the query alone when the state is unknown; "" when ASH
// never saw the pid by then.
std::function<std::string(int, std::int64_t)> blocker_queries(
    Lookup<std::optional<schema::LatestActivity>, int, std::int64_t> latest_activity) {
  return [latest = std::move(latest_activity)](int pid, std::int64_t t) {
    auto a = latest(pid, t);
    if (!a) return std::string();
    return a->state.empty() ? a->query : fmt::format("{} ({})", a->query, a->state);
  };
}

// Facts::top_cpu_query (passes.h).
void name_top_cpu_query(const Lookup<std::optional<std::string>, std::int64_t>& query_text,
                        Facts& f) {
  // The query text with the most rows (and how many), if any.
  const auto top = [&query_text](const std::map<std::int64_t, std::int64_t>& rows_by_id,
                                 std::string& text_out, std::int64_t& rows_out) {
    std::int64_t best_id = 0, best_rows = 0;
    for (const auto& [id, rows] : rows_by_id) {
      if (id != 0 && rows > best_rows) std::tie(best_id, best_rows) = std::tie(id, rows);
    }
    if (best_rows == 0) return;
    if (auto text = query_text(best_id)) {
      text_out = std::move(*text);
      rows_out = best_rows;
    }
  };
  top(f.ash_cpu_query_rows, f.top_cpu_query, f.top_cpu_query_rows);
  if (f.top_cpu_query.empty())
    top(f.ash_active_query_rows, f.top_active_query, f.top_active_query_rows);
}

}  // namespace stallscope::correlate::detail
